"""Generate the Python code of protos/ into libs/protos (imported as ``mahjong.v1``) and the API
reference page docs/api.md (`mahjong_infra.apidoc`).

``python -m mahjong_infra.protogen`` regenerates in place; ``--check`` generates into a temporary
folder and fails when the committed code or page differs, so CI catches a proto edited without
``make proto``.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPOSITORY / "protos"
PACKAGE_ROOT = REPOSITORY / "libs" / "protos"
GENERATED = PACKAGE_ROOT / "mahjong" / "v1"
API_REFERENCE = REPOSITORY / "docs" / "api.md"
PACKAGE_INIT = '"""Generated from protos/mahjong/v1 by `make proto`. Never edit by hand."""\n'


def proto_files() -> list[Path]:
    """Every .proto of the public contract, in a stable order."""
    return sorted(PROTO_ROOT.glob("mahjong/v1/*.proto"))


def generate(output_root: Path) -> None:
    """Run protoc (grpcio-tools) with the gRPC and mypy-protobuf plugins into ``output_root``."""
    import grpc_tools  # local import: only the generator needs grpcio-tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    (output_root / "mahjong" / "v1").mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={output_root}",
        f"--grpc_python_out={output_root}",
        f"--mypy_out={output_root}",
        f"--mypy_grpc_out={output_root}",
        *(str(path.relative_to(PROTO_ROOT)) for path in proto_files()),
    ]
    bin_dir = str(Path(sys.executable).parent)
    environment = {"PATH": bin_dir + ":" + "/usr/bin:/bin"}
    # protoc's mypy plugin reports every file it writes on stderr; show that only on failure.
    completed = subprocess.run(command, cwd=PROTO_ROOT, env=environment, capture_output=True, text=True)
    if completed.returncode != 0:
        raise SystemExit(f"protoc failed:\n{completed.stderr}")
    (output_root / "mahjong" / "__init__.py").write_text("")
    (output_root / "mahjong" / "v1" / "__init__.py").write_text(PACKAGE_INIT)
    (output_root / "mahjong" / "v1" / "py.typed").write_text("")


def api_reference() -> str:
    """The API reference page of the current protos."""
    from mahjong_infra import apidoc

    return apidoc.render(apidoc.descriptor_set(PROTO_ROOT, proto_files()))


def differences(expected: Path, actual: Path) -> list[str]:
    """Names of files that differ, are missing or are extra between two generated trees."""
    comparison = filecmp.dircmp(expected, actual, ignore=["__pycache__"])
    found = [f"changed: {name}" for name in comparison.diff_files]
    found += [f"not committed: {name}" for name in comparison.left_only]
    found += [f"stale: {name}" for name in comparison.right_only]
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    arguments = parser.parse_args(argv)
    if not arguments.check:
        shutil.rmtree(GENERATED, ignore_errors=True)
        generate(PACKAGE_ROOT)
        API_REFERENCE.parent.mkdir(exist_ok=True)
        API_REFERENCE.write_text(api_reference())
        print(f"generated {len(proto_files())} protos into {GENERATED.relative_to(REPOSITORY)}")
        return 0
    with tempfile.TemporaryDirectory() as temporary:
        generate(Path(temporary))
        found = differences(Path(temporary) / "mahjong" / "v1", GENERATED)
    if not API_REFERENCE.exists() or API_REFERENCE.read_text() != api_reference():
        found.append(f"changed: {API_REFERENCE.relative_to(REPOSITORY)}")
    if found:
        print("generated code differs from protos/ — run `make proto` and commit:", *found, sep="\n  ")
        return 1
    print("generated code matches protos/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
