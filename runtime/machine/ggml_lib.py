"""ggml's device API through ctypes: the functions llama-cpp-python 0.3.36 does not bind, declared once.

Its own module because both the CPU-variant probe and the hardware inventory use it, and neither may
import the other's module in both directions.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path


@functools.cache
def libggml() -> ctypes.CDLL | None:
    """The libggml that libllama uses, with the device functions 0.3.36 does not bind declared once."""
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    # The file libllama links against (its soname), not a same-named copy: wheels store copies rather than
    # symlinks, and a second copy would be a second ggml with its own, empty, device registry.
    path = next(
        (
            lib_dir / n
            for n in ("libggml.so.0", "libggml.0.dylib", "libggml.dylib", "ggml.dll", "libggml.so")
            if (lib_dir / n).exists()
        ),
        None,
    )
    if path is None:
        return None
    lib = ctypes.CDLL(str(path))
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_load.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_load.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_description.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_description.restype = ctypes.c_char_p
    size_p = ctypes.POINTER(ctypes.c_size_t)
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size_p, size_p]
    lib.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_name.restype = ctypes.c_char_p
    # The RPC backend (runtime.machine.rpc): found by name, its entry points by address, as llama.cpp's own tools do,
    # because a GGML_BACKEND_DL build keeps it in a library loaded at run time.
    lib.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    lib.ggml_backend_register.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    return lib


ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
RPC_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
# endpoint, cache_dir, n_threads, n_devices, devices
RPC_START_SERVER = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)
)


@functools.cache
def libggml_base() -> ctypes.CDLL | None:
    """libggml-base, where ggml_abort and its callback live."""
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    names = ("libggml-base.so.0", "libggml-base.0.dylib", "libggml-base.dylib", "ggml-base.dll", "libggml-base.so")
    path = next((lib_dir / n for n in names if (lib_dir / n).exists()), None)
    if path is None:
        return None
    lib = ctypes.CDLL(str(path))
    lib.ggml_set_abort_callback.argtypes = [ABORT_CALLBACK]
    lib.ggml_set_abort_callback.restype = ABORT_CALLBACK
    return lib
