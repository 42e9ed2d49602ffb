"""Strategies for what a hostile client sends: text of every kind (control characters,
other scripts' digits, lone surrogates standing for bytes that were not UTF-8), numbers
written in every wrong way, raw header bytes, and XML documents built from the element
names each S3 body uses, so examples get past the root-element check into the fields."""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from hypothesis import strategies as st

# Characters that broke parsers before: C0 controls, DEL, NEL, other scripts' digits,
# superscripts (isdigit() but not int()), full-width digits, XML specials, a lone
# surrogate (surrogateescape's stand-in for the byte 0xFF), non-characters.
NASTY = ["\x00", "\x01", "\x0b", "\r", "\n", "\t", "\x7f", "\x85", "²", "٣", "７", "_",
         "<", "&", ";", "%", "\udcff", "\ufffe", "\uffff", "\u2028", " ", "-", "+", "é"]

nasty_text = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=4)),
                      max_size=12).map("".join)
any_text = st.one_of(st.text(max_size=40), nasty_text)
# Text a parser received from a str (lxml element text cannot hold surrogates or NUL).
xml_text = st.text(st.characters(blacklist_categories=("Cs",),
                                 blacklist_characters="\x00"), max_size=30)

numbers = st.one_of(
    st.integers(min_value=-10, max_value=20000).map(str),
    st.integers(min_value=0).map(str),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.sampled_from(["", " 1", "1 ", "+1", "1_0", "0x10", "1e3", "1.5", "²", "٣", "１２",
                     "-0", "00", "0" * 30 + "1"]),
    nasty_text,
)

header_bytes = st.one_of(
    st.binary(max_size=60),
    any_text.map(lambda t: t.encode("utf-8", "surrogateescape")),
    numbers.map(lambda t: t.encode("utf-8", "surrogateescape")),
)


def element(name: str, children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return children.map(lambda inner: f"<{name}>{inner}</{name}>")


def leaf(names: Sequence[str]) -> st.SearchStrategy[str]:
    """One element with a name from `names` and hostile (escaped) text."""
    return st.tuples(st.sampled_from(list(names)), st.one_of(numbers, xml_text)).map(
        lambda pair: f"<{pair[0]}>{escape(pair[1])}</{pair[0]}>")


def document(root: str, names: Sequence[str], depth: int = 3) -> st.SearchStrategy[bytes]:
    """An XML document rooted at `root` whose elements are named from `names` (nested up
    to `depth`), sometimes in the S3 namespace, sometimes with a declaration."""
    inner: st.SearchStrategy[str] = leaf(names)
    for _ in range(depth):
        inner = st.one_of(
            leaf(names),
            st.tuples(st.sampled_from(list(names)), st.lists(inner, max_size=4)).map(
                lambda pair: f"<{pair[0]}>{''.join(pair[1])}</{pair[0]}>"),
        )
    namespace = st.sampled_from(["", ' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'])
    declaration = st.sampled_from(["", '<?xml version="1.0" encoding="UTF-8"?>'])
    return st.tuples(declaration, namespace, st.lists(inner, max_size=6)).map(
        lambda parts: f"{parts[0]}<{root}{parts[1]}>{''.join(parts[2])}</{root}>".encode(
            "utf-8", "surrogateescape"))


def body(root: str, names: Sequence[str]) -> st.SearchStrategy[bytes]:
    """What a client may send as the body of an operation whose document is `root`."""
    return st.one_of(document(root, names), st.binary(max_size=200),
                     document(root, names).map(lambda b: b.replace(b"<", b"<\x01", 1)))


# -- documents that follow an operation's schema, with hostile leaves -------------------

Spec = dict[str, "Spec | st.SearchStrategy[str]"]
_HOW_MANY = st.sampled_from([1] * 8 + [0, 2])  # mostly as the schema says, not always


class OneOf(dict):  # type: ignore[type-arg]
    """Exactly one of these elements, most of the time (the schema's xsd:choice); its own
    key in the parent spec is not an element name."""


def value(*plausible: str) -> st.SearchStrategy[str]:
    """A leaf's text: mostly one of the values the operation expects, else hostile."""
    expected = st.sampled_from(plausible) if plausible else xml_text
    return st.one_of(expected, expected, expected, numbers, xml_text)


def _element(name: str, child: Spec | st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    inner = child.map(escape) if isinstance(child, st.SearchStrategy) else _content(child)
    return inner.map(lambda text: f"<{name}>{text}</{name}>")


def _content(spec: Spec) -> st.SearchStrategy[str]:
    groups = []
    for name, child in spec.items():
        if isinstance(child, OneOf):
            one = st.one_of([_element(n, c) for n, c in child.items()])
        else:
            one = _element(name, child)
        groups.append(_HOW_MANY.flatmap(lambda k, o=one: st.lists(o, min_size=k,
                                                                   max_size=k)))
    return st.tuples(*groups).map(lambda found: "".join(x for group in found for x in group))


def schema_body(root: str, spec: Spec) -> st.SearchStrategy[bytes]:
    """A document rooted at `root` that mostly follows `spec` (element -> leaf strategy or
    nested spec; each element present once, sometimes missing or repeated)."""
    namespace = st.sampled_from(["", ' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'])
    return st.tuples(namespace, _content(spec)).map(
        lambda parts: f"<{root}{parts[0]}>{parts[1]}</{root}>".encode(
            "utf-8", "surrogateescape"))
