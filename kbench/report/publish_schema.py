"""Print the policy file's JSON Schema (kbench.report.policy_schema), the text of schemas/policy.schema.json:

    python -m kbench.report.publish_schema > schemas/policy.schema.json

(A module of its own: the package imports policy_schema, so `python -m` on it would run it a second time.)
"""
from kbench.report.policy_schema import schema_text

if __name__ == "__main__":
    print(schema_text(), end="")
