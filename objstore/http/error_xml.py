"""The S3 error document, and the two rules every S3 XML answer follows: how a document is
serialized (XML declaration, UTF-8) and how any text becomes element text. Here, below
`s3/`, because the connection (`http/channel.py`) and the site (`http/site.py`) answer
with S3 errors before any S3 resource runs; `s3/xml.py` builds the other documents on it.

An S3 key may hold characters that XML 1.0 cannot carry (U+0001 to U+001F but tab, newline
and carriage return; U+FFFE, U+FFFF): AWS writes each as a numeric character reference
(`&#x1;`), and `set_text` does the same, so no key or echoed value can fail a response.
Pure: lxml, no Twisted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lxml import etree


def serialize(root: etree._Element) -> bytes:
    """A response document: XML declaration, UTF-8."""
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def sub_element(parent: etree._Element, tag: str, text: str | None = None) -> etree._Element:
    """A child element `tag` of `parent`, with `text` when given (`set_text`)."""
    child = etree.SubElement(parent, tag)
    if text is not None:
        set_text(child, text)
    return child


# A character outside XML 1.0's Char production (lxml refuses it in text); the group keeps
# it in re.split's result.
_NOT_XML_CHAR = re.compile("([^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff])")


def set_text(element: etree._Element, text: str) -> None:
    """The text of `element`; characters XML 1.0 cannot carry become numeric character
    references (`&#x1;`), as AWS writes them."""
    if text.isprintable() or _NOT_XML_CHAR.search(text) is None:  # printable: valid XML
        element.text = text
        return
    pieces = _NOT_XML_CHAR.split(text)
    element.text = pieces[0] or None
    for index in range(1, len(pieces), 2):
        reference = etree.Entity(f"#x{ord(pieces[index]):X}")
        reference.tail = pieces[index + 1] or None
        element.append(reference)


def error_document(
    code: str, message: str, request_id: str, host_id: str, fields: Mapping[str, str]
) -> bytes:
    root = etree.Element("Error")
    sub_element(root, "Code", code)
    sub_element(root, "Message", message)
    for name, value in fields.items():
        sub_element(root, name, value)
    sub_element(root, "RequestId", request_id)
    sub_element(root, "HostId", host_id)
    return serialize(root)
