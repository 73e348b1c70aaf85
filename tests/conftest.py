# The worker script is run by torchrun in a subprocess, not imported by pytest.
collect_ignore = ["_distributed_worker.py"]
