"""Policy documents (objstore/iam/policy.py) as a grant author may write them: any JSON
value validates or raises PolicyError (an admin 400), nothing else; a document that
validates compiles and evaluates any action on any resource."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from objstore.iam.actions import KNOWN_ACTIONS
from objstore.iam.policy import PolicyError, compile_policy, is_allowed, validate
from tests.fuzz.strategies import any_text

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
              any_text),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(any_text, inner, max_size=3)),
    max_leaves=8,
)
actions = st.one_of(st.sampled_from(sorted(KNOWN_ACTIONS)),
                    st.sampled_from(["*", "s3:*", "svc:*", "s3:Get*", "s3:?etObject",
                                     "s3:*Object*", "*" * 40, "s3:" + "*?" * 30]),
                    any_text)
resources = st.one_of(
    st.sampled_from(["*", "arn:aws:s3:::*", "arn:aws:s3:::bucket", "arn:aws:s3:::b*/k?y",
                     "arn:aws:s3:::" + "*" * 63, "arn:aws:s3:::b/" + "*?" * 200]),
    any_text.map(lambda t: "arn:aws:s3:::" + t), any_text)
statement = st.fixed_dictionaries(
    {"Effect": st.sampled_from(["Allow", "Deny", "allow"]),
     "Action": st.one_of(actions, st.lists(actions, max_size=3)),
     "Resource": st.one_of(resources, st.lists(resources, max_size=3))},
    optional={"Sid": st.one_of(any_text, st.integers()), "Condition": json_values})
documents = st.one_of(
    st.fixed_dictionaries({"Version": st.sampled_from(["2012-10-17", "2008-10-17"]),
                           "Statement": st.one_of(st.lists(statement, max_size=3),
                                                  statement)},
                          optional={"Id": any_text}),
    json_values,
)


@given(documents, actions, resources)
def test_documents_validate_or_are_refused(document: Any, action: str, resource: str) -> None:
    document = json.loads(json.dumps(document))  # what the admin API decodes
    try:
        validate(document)
    except PolicyError as refused:
        assert str(refused)
        return
    json.dumps(document, ensure_ascii=False).encode("utf-8")  # storable as the store writes it
    policy = compile_policy(document)
    is_allowed([policy], action, resource)
