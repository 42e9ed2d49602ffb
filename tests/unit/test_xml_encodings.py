"""The safe XML parser of S3 request bodies reads every document as UTF-8: a DTD can not
hide from the parsers' byte-level refusal in another encoding (UTF-16 once slipped past it,
and an entity reference then silently truncated a key)."""

from __future__ import annotations

import pytest

from objstore.errors import S3Error
from objstore.s3.multipart_xml import parse_complete
from objstore.s3.objects_xml import parse_delete_request
from objstore.s3.xml import parse_document

DTD_DELETE = ('<?xml version="1.0" encoding="UTF-16"?>'
              '<!DOCTYPE Delete [<!ENTITY e "X">]>'
              '<Delete><Object><Key>a&e;b</Key></Object></Delete>')


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_a_dtd_in_another_encoding_is_refused(encoding: str) -> None:
    body = DTD_DELETE.replace("UTF-16", encoding.upper()).encode(encoding)
    with pytest.raises(S3Error) as info:
        parse_delete_request(body)
    assert info.value.code == "MalformedXML"


def test_a_complete_upload_document_in_utf16_is_refused() -> None:
    body = ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE C [<!ENTITY n "1">]>'
            '<CompleteMultipartUpload><Part><PartNumber>&n;</PartNumber><ETag>"e"</ETag>'
            '</Part></CompleteMultipartUpload>').encode("utf-16")
    with pytest.raises(S3Error) as info:
        parse_complete(body)
    assert info.value.code == "MalformedXML"


def test_utf8_documents_still_parse_whatever_they_declare() -> None:
    root = parse_document(b'\xef\xbb\xbf<?xml version="1.0" encoding="UTF-8"?>'
                          b"<Tagging><TagSet/></Tagging>", "Tagging")
    assert root.tag == "Tagging"
    request = parse_delete_request(
        '<Delete><Object><Key>clé &amp; co</Key></Object></Delete>'.encode())
    assert [entry.key for entry in request.entries] == ["clé & co"]
