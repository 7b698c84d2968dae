# On PYTHONPATH for torchrun in the InteropTorchrun tests: c10d's TCPStore
# defaults to its libuv server (use_libuv=True), and a PyTorch built without
# libuv (Debian 13's python3-torch 2.6) refuses it. Every TCPStore that
# torchrun's agent makes without saying otherwise uses the classic server
# instead. Nothing else changes; where PyTorch has libuv this is harmless.
try:
    import torch.distributed as _dist
except ImportError:  # no PyTorch here: nothing to adjust
    _dist = None

if _dist is not None and hasattr(_dist, "TCPStore"):
    _init = _dist.TCPStore.__init__

    def _classic_init(self, *args, **kwargs):
        kwargs.setdefault("use_libuv", False)
        _init(self, *args, **kwargs)

    _dist.TCPStore.__init__ = _classic_init
