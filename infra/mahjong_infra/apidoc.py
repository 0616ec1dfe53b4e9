"""The API reference page (docs/api.md), generated from the protos' descriptors and comments.

`make proto` writes it next to the generated code and `make proto-check` (part of `make test`, so
CI) fails when the committed page differs from the protos: the page is always current. The page
is plain Markdown: every service with its rpcs, every message with its fields (type, number and
comment), every enum with its values, in the order of the .proto files.

`undocumented` lists every service, rpc, message, field, oneof, enum and enum value without a
comment (a test keeps that list empty; `buf lint`'s COMMENTS rules say the same in `make lint`).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pb2

# Paths of the SourceCodeInfo locations (descriptor.proto field numbers).
MESSAGE_TYPE, ENUM_TYPE, SERVICE, SYNTAX = 4, 5, 6, 12
FIELD, NESTED_TYPE, NESTED_ENUM, ONEOF = 2, 3, 4, 8
ENUM_VALUE, METHOD = 2, 2
SCALAR_NAMES = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in descriptor_pb2.FieldDescriptorProto.Type.items()
    if name not in ("TYPE_MESSAGE", "TYPE_ENUM", "TYPE_GROUP")
}
HEADER = """# API reference: `mahjong.v1`

Generated from `protos/mahjong/v1/*.proto` by `make proto` (`infra/mahjong_infra/apidoc.py`);
never edit by hand. `make test` fails when this page and the protos differ. Services are called
over gRPC with `authorization: Bearer <JWT>` metadata (the player is the token's subject; the
`ops` and `finance` roles are named where a method needs them). Tiles are compact codes
(`1m`..`9m`, `1p`..`9p`, `1s`..`9s`, honors `1z`..`7z`, flowers `1f`..`8f`), seats are 0..3 in turn
order, money is integer beans.
"""


Check = Callable[[tuple[int, ...], str], None]


def descriptor_set(proto_root: Path, files: Sequence[Path]) -> descriptor_pb2.FileDescriptorSet:
    """The files' descriptors with their comments (protoc's source info)."""
    import grpc_tools  # local import: only the generator needs grpcio-tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as temporary:
        output = Path(temporary) / "descriptors.binpb"
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"-I{well_known}",
            "--include_source_info",
            f"--descriptor_set_out={output}",
            *(str(path.relative_to(proto_root)) for path in files),
        ]
        completed = subprocess.run(command, cwd=proto_root, capture_output=True, text=True)
        if completed.returncode != 0:
            raise SystemExit(f"protoc failed:\n{completed.stderr}")
        return descriptor_pb2.FileDescriptorSet.FromString(output.read_bytes())


@dataclass(frozen=True)
class _Comments:
    """A file's comments by location path."""

    leading: dict[tuple[int, ...], str]
    detached: dict[tuple[int, ...], list[str]]

    @classmethod
    def of(cls, file: descriptor_pb2.FileDescriptorProto) -> _Comments:
        leading: dict[tuple[int, ...], str] = {}
        detached: dict[tuple[int, ...], list[str]] = {}
        for location in file.source_code_info.location:
            path = tuple(location.path)
            text = (location.leading_comments + location.trailing_comments).strip()
            if text:
                leading[path] = _clean(text)
            if location.leading_detached_comments:
                detached[path] = [_clean(comment) for comment in location.leading_detached_comments]
        return cls(leading, detached)

    def get(self, path: tuple[int, ...]) -> str:
        return self.leading.get(path, "")


def _clean(comment: str) -> str:
    """The comment's lines, stripped, with `<` and `>` escaped (Markdown would take `<id>` for HTML)."""
    text = "\n".join(line.strip() for line in comment.strip().splitlines())
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _one_line(text: str) -> str:
    """A comment for a table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _type_name(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.type_name:
        name = field.type_name.removeprefix(".mahjong.v1.").removeprefix(".")
        shown = f"[`{name}`](#{_anchor(name)})" if not name.startswith("google.") else f"`{name}`"
    else:
        shown = f"`{SCALAR_NAMES[field.type]}`"
    if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        return f"repeated {shown}"
    if field.proto3_optional:
        return f"optional {shown}"
    return shown


def _anchor(name: str) -> str:
    return name.lower().replace(".", "")


def render(files: descriptor_pb2.FileDescriptorSet) -> str:
    """The Markdown page for the `mahjong/` files of the set."""
    lines = [HEADER]
    own = sorted(
        (file for file in files.file if file.name.startswith("mahjong/")),
        key=lambda file: (not file.name.endswith("_service.proto"), file.name),
    )
    lines.append("Files: " + ", ".join(f"[`{file.name}`](#{_file_anchor(file.name)})" for file in own) + "\n")
    for file in own:
        lines.extend(_render_file(file))
    return "\n".join(lines).rstrip() + "\n"


def _file_anchor(name: str) -> str:
    return name.replace("/", "").replace(".", "")


def _render_file(file: descriptor_pb2.FileDescriptorProto) -> Iterator[str]:
    comments = _Comments.of(file)
    yield f"## {file.name}\n"
    for comment in [*comments.detached.get((SYNTAX,), []), comments.get((SYNTAX,))]:
        if comment:
            yield comment + "\n"
    for index, service in enumerate(file.service):
        yield from _render_service(service, (SERVICE, index), comments)
    for index, message in enumerate(file.message_type):
        yield from _render_message(message, message.name, (MESSAGE_TYPE, index), comments)
    for index, enum in enumerate(file.enum_type):
        yield from _render_enum(enum, enum.name, (ENUM_TYPE, index), comments)


def _render_service(
    service: descriptor_pb2.ServiceDescriptorProto, path: tuple[int, ...], comments: _Comments
) -> Iterator[str]:
    yield f"### service {service.name}\n"
    yield comments.get(path) + "\n"
    yield "| rpc | request | response | what, who may call |"
    yield "|---|---|---|---|"
    for index, method in enumerate(service.method):
        request = method.input_type.removeprefix(".mahjong.v1.")
        response = method.output_type.removeprefix(".mahjong.v1.")
        streamed = "stream " if method.server_streaming else ""
        request_link = f"[`{request}`](#{_anchor(request)})"
        response_link = f"{streamed}[`{response}`](#{_anchor(response)})"
        what = _one_line(comments.get((*path, METHOD, index)))
        yield f"| `{method.name}` | {request_link} | {response_link} | {what} |"
    yield ""


def _render_message(
    message: descriptor_pb2.DescriptorProto, name: str, path: tuple[int, ...], comments: _Comments
) -> Iterator[str]:
    yield f"### {name}\n"
    comment = comments.get(path)
    if comment:
        yield comment + "\n"
    real_oneofs = {
        index: oneof.name
        for index, oneof in enumerate(message.oneof_decl)
        if not any(field.proto3_optional and field.oneof_index == index for field in message.field)
    }
    if message.field:
        yield "| field | type | number | description |"
        yield "|---|---|---|---|"
        for index, field in enumerate(message.field):
            oneof = (
                f" (one of `{real_oneofs[field.oneof_index]}`)"
                if field.HasField("oneof_index") and field.oneof_index in real_oneofs
                else ""
            )
            yield (
                f"| `{field.name}` | {_type_name(field)}{oneof} | {field.number} "
                f"| {_one_line(comments.get((*path, FIELD, index)))} |"
            )
        yield ""
    else:
        yield "No fields.\n"
    for index, oneof_name in real_oneofs.items():
        yield f"Oneof `{oneof_name}`: {_one_line(comments.get((*path, ONEOF, index)))}\n"
    for index, nested in enumerate(message.nested_type):
        yield from _render_message(nested, f"{name}.{nested.name}", (*path, NESTED_TYPE, index), comments)
    for index, enum in enumerate(message.enum_type):
        yield from _render_enum(enum, f"{name}.{enum.name}", (*path, NESTED_ENUM, index), comments)


def _render_enum(
    enum: descriptor_pb2.EnumDescriptorProto, name: str, path: tuple[int, ...], comments: _Comments
) -> Iterator[str]:
    yield f"### enum {name}\n"
    yield comments.get(path) + "\n"
    yield "| value | number | description |"
    yield "|---|---|---|"
    for index, value in enumerate(enum.value):
        yield f"| `{value.name}` | {value.number} | {_one_line(comments.get((*path, ENUM_VALUE, index)))} |"
    yield ""


def undocumented(files: descriptor_pb2.FileDescriptorSet) -> list[str]:
    """Every service, rpc, message, field, oneof, enum and enum value of the `mahjong/` files
    without a comment."""
    missing: list[str] = []
    for file in files.file:
        if not file.name.startswith("mahjong/"):
            continue
        comments = _Comments.of(file)

        def check(path: tuple[int, ...], what: str, comments: _Comments = comments) -> None:
            if not comments.get(path):
                missing.append(what)

        for index, service in enumerate(file.service):
            check((SERVICE, index), f"service {service.name}")
            for method_index, method in enumerate(service.method):
                check((SERVICE, index, METHOD, method_index), f"rpc {service.name}.{method.name}")
        for index, message in enumerate(file.message_type):
            _check_message(message, message.name, (MESSAGE_TYPE, index), check)
        for index, enum in enumerate(file.enum_type):
            _check_enum(enum, enum.name, (ENUM_TYPE, index), check)
    return missing


def _check_message(
    message: descriptor_pb2.DescriptorProto, name: str, path: tuple[int, ...], check: Check
) -> None:
    check(path, f"message {name}")
    for index, field in enumerate(message.field):
        check((*path, FIELD, index), f"field {name}.{field.name}")
    for index, oneof in enumerate(message.oneof_decl):
        if not oneof.name.startswith("_"):  # proto3 `optional` makes a synthetic oneof "_name"
            check((*path, ONEOF, index), f"oneof {name}.{oneof.name}")
    for index, nested in enumerate(message.nested_type):
        _check_message(nested, f"{name}.{nested.name}", (*path, NESTED_TYPE, index), check)
    for index, enum in enumerate(message.enum_type):
        _check_enum(enum, f"{name}.{enum.name}", (*path, NESTED_ENUM, index), check)


def _check_enum(
    enum: descriptor_pb2.EnumDescriptorProto, name: str, path: tuple[int, ...], check: Check
) -> None:
    check(path, f"enum {name}")
    for index, value in enumerate(enum.value):
        check((*path, ENUM_VALUE, index), f"enum value {name}.{value.name}")
