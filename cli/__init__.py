"""The command line: click commands and rich rendering only. The engine lives in kbench.*"""
