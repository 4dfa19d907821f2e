"""kgpu.kube.api.json_codec reads and writes what json alone did, orjson's refusals
included; libcurl's errors come out as kgpu's own."""

from __future__ import annotations

import json

import pycurl

from kgpu.kube.api import json_codec
from kgpu.kube.api.errors import Timeout, Unavailable, from_exception


def test_documents_orjson_refuses_read_and_write_as_json_does() -> None:
    for text in ('{"name": "a\\ud800"}', '{"n": NaN}', '{"big": 123456789012345678901234567890}'):
        assert repr(json_codec.loads(text)) == repr(json.loads(text))
    lone = {"name": "a\ud800"}
    assert json.loads(json_codec.dumps(lone)) == lone


def test_long_numbers_found_in_bytes_as_in_text() -> None:
    # The bytes check (a translate and a search) finds the runs the text's expression does.
    cases = [
        b'{"big": 1234567890123456789}',  # 19 digits: json keeps the integer exact
        b'{"big": 123456789012345678}',  # 18: orjson's
        b'{"s": "x1234567890123456789y"}',
        b'{"a": 12345678901234567, "b": 12}',
        b'{"t": "\xc3\xa9 9999999999999999999"}',
        b'{"t": "\xd9\xa1\xd9\xa2 123"}',  # Arabic-Indic digits are not ASCII digits
        b"",
    ]
    for raw in cases:
        text = raw.decode()
        assert json_codec._has_long_number(raw) == json_codec._has_long_number(text), raw
        assert json_codec._has_long_number(raw) == (
            json_codec._LONG_NUMBER.search(text) is not None
        )
        if raw:
            assert repr(json_codec.loads(raw)) == repr(json.loads(raw))


def test_ordinary_documents_round_trip() -> None:
    obj = {"metadata": {"name": "p", "annotations": {"k": "ü"}}, "spec": {"n": [1, 2.5, None]}}
    assert json_codec.loads(json_codec.dumps(obj)) == obj
    assert json_codec.loads(b'{"a": 1}') == {"a": 1}


def test_curl_errors_are_timeouts_or_unavailable() -> None:
    timed_out = from_exception(pycurl.error(pycurl.E_OPERATION_TIMEDOUT, "too slow"), "GET /x")
    assert isinstance(timed_out, Timeout) and not timed_out.status
    refused = from_exception(pycurl.error(pycurl.E_COULDNT_CONNECT, "refused"), "GET /x")
    assert isinstance(refused, Unavailable) and not isinstance(refused, Timeout)
    assert not refused.status and "curl error 7" in str(refused)
