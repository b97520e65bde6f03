"""The real hardware: a CUDA GPU through its driver (`devices.py`, `cuda_driver.py`) and what the installed
driver says about itself (`driver_info.py`). Kept out of `model/`, which replays traces on simulated devices
and loads no driver; a run without a GPU never loads ctypes or libcuda."""
