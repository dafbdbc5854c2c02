"""Which cuBLAS a process that has not imported torch can load here, the view CTranslate2
(faster-whisper's engine) has: its PyPI build (4.8.5) dlopens CUDA 12's libcublas.so.12 by soname,
while torch loads its own cuBLAS (libcublas.so.13 for a cu130 build) from its wheel's folders.
benchmarks/gpu.sh writes this beside the bench, so a GPU check that had to leave the faster-whisper
peer out says why. Usage: python benchmarks/cuda_libraries.py  (prints JSON)"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import sys

SONAMES = ("libcublas.so.12", "libcublasLt.so.12", "libcublas.so.13", "libcublasLt.so.13")


def loadable(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> int:
    report = {"loadable": {name: loadable(name) for name in SONAMES},
              "packages": {name: version(name) for name in ("ctranslate2", "faster-whisper", "av", "torch")}}
    report["ctranslate2_cuda_12_libraries"] = all(report["loadable"][name] for name in SONAMES[:2])
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
