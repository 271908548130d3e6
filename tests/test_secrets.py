"""Credentials never reach a manifest, a message or a log (:func:`convcli.io.storage.redact`)."""

from __future__ import annotations

import json
import shlex
import sys

import pytest
from helpers import MANIFEST, manifest_records, ok, run

from convcli.app.manifest import is_manifest_name
from convcli.app.run import Reporter
from convcli.io.storage import redact

SECRETS = ("AKIAEXAMPLE", "s3cr3t", "sessTOK", "hunter2", "sigSIG")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("secret=s3cr3t", "secret=***"),
        ("key=AKIAEXAMPLE", "key=***"),
        ("password=hunter2 with spaces", "password=***"),
        ("--storage-option=token=sessTOK", "--storage-option=token=***"),
        (
            'client_kwargs={"aws_session_token": "sessTOK", "region_name": "eu"}',
            'client_kwargs={"aws_session_token": "***", "region_name": "eu"}',
        ),
        ("{'password': 'hunter2', 'anon': True}", "{'password': '***', 'anon': True}"),
        ("s3://AKIAEXAMPLE:s3cr3t@bucket/a.png: not found", "s3://***@bucket/a.png: not found"),
        ("https://user:hunter2@host/a.png", "https://***@host/a.png"),
        (
            "https://host/a.png?X-Amz-Signature=sigSIG&x=1",
            "https://host/a.png?X-Amz-Signature=***&x=1",
        ),
        ("endpoint_url=http://127.0.0.1:9000", "endpoint_url=http://127.0.0.1:9000"),
        ("anon=true", "anon=true"),
        ("s3://bucket/keyboard@2x.png", "s3://bucket/keyboard@2x.png"),
        ("photos/a.png: not an image file", "photos/a.png: not an image file"),
    ],
)
def test_redact_hides_secrets_and_keeps_the_rest(text, expected):
    assert redact(text) == expected


def _secret_args(out) -> list[str]:
    return [
        "conv",
        "-k",
        "vertical",
        "-o",
        str(out),
        "-q",
        "--storage-option",
        "key=AKIAEXAMPLE",
        "--storage-option",
        "secret=s3cr3t",
        "--storage-option",
        'client_kwargs={"aws_session_token": "sessTOK"}',
        "--storage-option",
        "anon=false",
    ]


def test_the_manifest_command_shows_no_secret(tmp_path, photo, monkeypatch):
    out = tmp_path / "out"
    args = [*_secret_args(out), str(photo)]
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/convcli", *args])
    ok(*args)
    text = (out / MANIFEST).read_text()
    assert not any(secret in text for secret in SECRETS)
    command = manifest_records(out)[0]["command"]
    assert command == shlex.join(
        [
            "convcli",
            "conv",
            "-k",
            "vertical",
            "-o",
            str(out),
            "-q",
            "--storage-option",
            "key=***",
            "--storage-option",
            "secret=***",
            "--storage-option",
            'client_kwargs={"aws_session_token": "***"}',
            "--storage-option",
            "anon=false",
            str(photo),
        ]
    )


def test_the_manifest_on_object_storage_shows_no_secret(photo, monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    out = "memory://AKIAEXAMPLE:s3cr3t@convcli-secrets/out"
    args = [*_secret_args(out), str(photo)]
    monkeypatch.setattr(sys, "argv", ["convcli", *args])
    try:
        ok(*args)
        name = next(p for p in fs.find("/") if is_manifest_name(p.rsplit("/", 1)[1]))
        text = fs.cat_file(name).decode()
    finally:
        for path in fs.find("/"):
            if "convcli-secrets" in path:
                fs.rm(path)
    assert not any(secret in text for secret in SECRETS)
    assert "memory://***@convcli-secrets/out" in json.loads(text)["command"]


def test_an_input_url_with_credentials_fails_on_a_line_without_them(tmp_path):
    result = run(
        "conv",
        "-k",
        "vertical",
        "memory://AKIAEXAMPLE:s3cr3t@nowhere/a.png",
        "-o",
        tmp_path / "out",
    )
    assert result.exit_code == 1
    assert "memory://***@nowhere/a.png: " in result.stderr
    assert not any(secret in result.output for secret in SECRETS)


def test_a_storage_option_without_a_name_is_not_echoed(tmp_path, photo):
    result = run("conv", photo, "-o", tmp_path, "--storage-option", "s3cr3t")
    assert result.exit_code == 2
    assert "--storage-option" in result.stderr and "s3cr3t" not in result.output


def test_every_message_hides_secrets(capsys):
    Reporter().say(
        "s3://AKIAEXAMPLE:s3cr3t@b/a.png: internal error: TypeError: bad {'token': 'sessTOK'}"
    )
    err = capsys.readouterr().err
    assert err == "convcli: s3://***@b/a.png: internal error: TypeError: bad {'token': '***'}\n"
