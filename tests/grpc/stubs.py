"""Generate the echo.proto stubs at run time (no checked-in generated code) and import them."""

import atexit
import importlib
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def load():
    """Return (echo_pb2, echo_pb2_grpc), generated into $WEIR_GRPC_STUBS_DIR (owned and removed
    by the Rust test helper, since a killed server cannot clean up) or a temp dir removed at exit."""
    from grpc_tools import protoc
    import grpc_tools

    out = os.environ.get("WEIR_GRPC_STUBS_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
    else:
        out = tempfile.mkdtemp(prefix="weir-grpc-stubs-")
        atexit.register(shutil.rmtree, out, True)
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main([
        "grpc_tools.protoc",
        f"-I{HERE}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        os.path.join(HERE, "echo.proto"),
    ])
    if rc != 0:
        sys.exit(f"protoc failed with {rc}")
    sys.path.insert(0, out)
    return importlib.import_module("echo_pb2"), importlib.import_module("echo_pb2_grpc")
