"""How a callable is timed and checked: the CUDA-graph and wall-clock timers, the timing states (the `power`
axis), NVML clocks and power, the copy/read bandwidth probes, the device probe and the correctness check.

Knows nothing of cases or kernels: it times callables and compares tensors.
"""
