"""The API reference (docs/api.md): every rpc, message, field and enum value of the protos is
commented, and the committed page is the one the protos generate."""

from __future__ import annotations

import pathlib

from mahjong_infra import apidoc, protogen


def test_every_service_rpc_message_field_oneof_and_enum_value_has_a_comment() -> None:
    files = apidoc.descriptor_set(protogen.PROTO_ROOT, protogen.proto_files())
    assert apidoc.undocumented(files) == []


def test_an_uncommented_field_is_reported(tmp_path: pathlib.Path) -> None:
    root = tmp_path
    (root / "mahjong").mkdir()
    proto = root / "mahjong" / "bare.proto"
    proto.write_text(
        'syntax = "proto3";\npackage mahjong.v1;\n// Commented.\nmessage Thing {\n  string name = 1;\n}\n'
    )
    assert apidoc.undocumented(apidoc.descriptor_set(root, [proto])) == ["field Thing.name"]


def test_the_committed_page_is_the_one_the_protos_generate_and_lists_every_rpc() -> None:
    page = protogen.API_REFERENCE.read_text()
    assert page == protogen.api_reference()
    files = apidoc.descriptor_set(protogen.PROTO_ROOT, protogen.proto_files())
    for file in files.file:
        for service in file.service:
            assert f"### service {service.name}" in page
            assert all(f"| `{method.name}` |" in page for method in service.method)
