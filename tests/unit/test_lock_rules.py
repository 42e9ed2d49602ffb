"""The object lock rules, exhaustively: every combination of version kind, retention mode,
retention state (active, expired, none), legal hold, bypass header and bypass permission
for deletion; every kind of retention change against every current retention; default
retention and the lock state of new versions."""

from __future__ import annotations

import datetime
import itertools
from dataclasses import replace

import pytest

from objstore.engine import lock_rules
from objstore.engine.lock_rules import (
    COMPLIANCE,
    GOVERNANCE,
    DefaultRetention,
    LockConfiguration,
    LockRequest,
    Retention,
)
from objstore.meta.records import ObjectRecord

NOW = 1_900_000_000.0
LATER = NOW + 3600
MUCH_LATER = NOW + 7200
EARLIER = NOW - 3600


def version(mode: str | None = None, until: float | None = None, hold: str | None = None,
            marker: bool = False) -> ObjectRecord:
    return ObjectRecord(bucket="b", key="k", version_id="v", blob_id="x", size=1, etag="e",
                        last_modified=NOW - 10, is_delete_marker=marker,
                        retention_mode=mode, retain_until_date=until, legal_hold_status=hold)


# -- deletion -----------------------------------------------------------------------------

MODES = [None, GOVERNANCE, COMPLIANCE]
STATES = ["active", "expired", "ends-now", "none"]
HOLDS = [None, "ON", "OFF"]
FLAGS = [False, True]


def until_for(state: str) -> float | None:
    return {"active": LATER, "expired": EARLIER, "ends-now": NOW, "none": None}[state]


def expected_deletable(marker: bool, mode: str | None, state: str, hold: str | None,
                       header: bool, permission: bool) -> bool:
    """The rules written as a table, independently of the implementation."""
    if marker:
        return True  # delete markers are always allowed
    if hold == "ON":
        return False  # nothing bypasses a legal hold
    protected = mode is not None and state == "active"
    if not protected:
        return True
    if mode == COMPLIANCE:
        return False  # never before expiry
    return header and permission  # GOVERNANCE: header AND s3:BypassGovernanceRetention


@pytest.mark.parametrize(("marker", "mode", "state", "hold", "header", "permission"),
                         list(itertools.product(FLAGS, MODES, STATES, HOLDS, FLAGS, FLAGS)))
def test_may_delete_every_combination(marker: bool, mode: str | None, state: str,
                                      hold: str | None, header: bool, permission: bool) -> None:
    record = version(mode, until_for(state) if mode else None, hold, marker)
    reason = lock_rules.may_delete(record, NOW, header, permission)
    assert (reason is None) == expected_deletable(marker, mode, state, hold, header,
                                                  permission), reason
    if reason is not None:
        assert isinstance(reason, str) and reason


def test_a_retention_date_without_a_mode_protects_nothing() -> None:
    assert lock_rules.may_delete(version(None, LATER), NOW, False, False) is None


def test_refusal_reasons_name_the_rule() -> None:
    assert "legal hold" in str(lock_rules.may_delete(version(hold="ON"), NOW, True, True))
    assert "COMPLIANCE" in str(lock_rules.may_delete(version(COMPLIANCE, LATER), NOW, True,
                                                     True))
    assert "bypass" in str(lock_rules.may_delete(version(GOVERNANCE, LATER), NOW, True,
                                                 False))
    assert "GOVERNANCE" in str(lock_rules.may_delete(version(GOVERNANCE, LATER), NOW, False,
                                                     True))


@pytest.mark.parametrize(("mode", "state", "applies"), [
    (GOVERNANCE, "active", True), (GOVERNANCE, "expired", False),
    (GOVERNANCE, "ends-now", False), (COMPLIANCE, "active", False), (None, "none", False),
])
def test_governance_applies_only_to_an_active_governance_retention(
    mode: str | None, state: str, applies: bool
) -> None:
    assert lock_rules.governance_applies(version(mode, until_for(state)), NOW) is applies


# -- retention changes --------------------------------------------------------------------

CHANGES = {
    "extend": lambda mode: Retention(mode, MUCH_LATER),
    "same": lambda mode: Retention(mode, LATER),
    "shorten": lambda mode: Retention(mode, LATER - 60),
    "remove": lambda mode: Retention(),
    "to-governance": lambda mode: Retention(GOVERNANCE, MUCH_LATER),
    "to-compliance": lambda mode: Retention(COMPLIANCE, MUCH_LATER),
}


def expected_change(mode: str | None, state: str, change: str, header: bool,
                    permission: bool) -> bool:
    if mode is None or state != "active":
        return True  # nothing to protect
    target = CHANGES[change](mode)
    keeps = target.mode == mode and target.until is not None and target.until >= LATER
    if keeps:
        return True  # extending (or keeping) is always allowed
    if mode == COMPLIANCE:
        return False
    return header and permission


@pytest.mark.parametrize(("mode", "state", "change", "header", "permission"),
                         list(itertools.product(MODES, ["active", "expired", "none"],
                                                list(CHANGES), FLAGS, FLAGS)))
def test_may_change_retention_every_combination(mode: str | None, state: str, change: str,
                                                header: bool, permission: bool) -> None:
    record = version(mode, until_for(state) if mode else None)
    new = CHANGES[change](mode)
    reason = lock_rules.may_change_retention(record, new, NOW, header, permission)
    assert (reason is None) == expected_change(mode, state, change, header, permission)


def test_governance_to_compliance_needs_the_bypass() -> None:
    record = version(GOVERNANCE, LATER)
    assert lock_rules.may_change_retention(record, Retention(COMPLIANCE, LATER), NOW,
                                           False, False) is not None
    assert lock_rules.may_change_retention(record, Retention(COMPLIANCE, LATER), NOW,
                                           True, True) is None


def test_compliance_to_governance_is_refused_even_with_the_bypass() -> None:
    record = version(COMPLIANCE, LATER)
    assert lock_rules.may_change_retention(record, Retention(GOVERNANCE, MUCH_LATER), NOW,
                                           True, True) is not None


def test_legal_hold_does_not_affect_retention_changes() -> None:
    record = version(GOVERNANCE, LATER, hold="ON")
    assert lock_rules.may_change_retention(record, Retention(GOVERNANCE, MUCH_LATER), NOW,
                                           False, False) is None


@pytest.mark.parametrize(("until", "problem"), [
    (NOW + 1, False), (NOW, True), (EARLIER, True), (None, False),
])
def test_retain_until_dates_lie_in_the_future(until: float | None, problem: bool) -> None:
    assert (lock_rules.future_date_problem(until, NOW) is not None) is problem


def test_changes_stamp_lock_updated_at_and_keep_last_modified() -> None:
    record = version()
    changed = lock_rules.with_retention(record, Retention(GOVERNANCE, LATER), NOW)
    assert (changed.retention_mode, changed.retain_until_date) == (GOVERNANCE, LATER)
    assert changed.lock_updated_at == NOW and changed.last_modified == record.last_modified
    held = lock_rules.with_legal_hold(changed, "ON", NOW + 1)
    assert held.legal_hold_status == "ON" and held.lock_updated_at == NOW + 1
    assert held.retention_mode == GOVERNANCE
    removed = lock_rules.with_retention(held, Retention(), NOW + 2)
    assert removed.retention_mode is None and removed.retain_until_date is None


# -- default retention and new versions ----------------------------------------------------


def utc(*args: int) -> float:
    return datetime.datetime(*args, tzinfo=datetime.UTC).timestamp()  # type: ignore[misc]


def test_default_retention_in_days() -> None:
    assert DefaultRetention(GOVERNANCE, days=3).until(NOW) == NOW + 3 * 86400


@pytest.mark.parametrize(("start", "years", "end"), [
    (utc(2024, 5, 17, 10, 30), 1, utc(2025, 5, 17, 10, 30)),
    (utc(2024, 2, 29, 12), 1, utc(2025, 2, 28, 12)),
    (utc(2024, 2, 29, 12), 4, utc(2028, 2, 29, 12)),
    (utc(2023, 12, 31), 100, utc(2123, 12, 31)),
])
def test_default_retention_in_calendar_years(start: float, years: int, end: float) -> None:
    assert DefaultRetention(COMPLIANCE, years=years).until(start) == end


def test_new_versions_get_the_explicit_lock_else_the_default() -> None:
    config = LockConfiguration(DefaultRetention(COMPLIANCE, days=1))
    explicit = LockRequest(GOVERNANCE, LATER, "ON")
    assert lock_rules.initial_lock(explicit, config, NOW) == (GOVERNANCE, LATER, "ON")
    assert lock_rules.initial_lock(LockRequest(), config, NOW) == (COMPLIANCE, NOW + 86400,
                                                                    None)
    assert lock_rules.initial_lock(LockRequest(legal_hold="ON"), config, NOW) == (
        COMPLIANCE, NOW + 86400, "ON")
    assert lock_rules.initial_lock(LockRequest(), LockConfiguration(), NOW) == (None, None,
                                                                                 None)
    assert lock_rules.initial_lock(LockRequest(), None, NOW) == (None, None, None)
    born = lock_rules.with_lock(version(), LockRequest(), config, NOW)
    assert born.retention_mode == COMPLIANCE and born.lock_updated_at is None


@pytest.mark.parametrize(("requested", "config", "applies"), [
    (LockRequest(), None, False),
    (LockRequest(), LockConfiguration(), False),
    (LockRequest(), LockConfiguration(DefaultRetention(GOVERNANCE, days=1)), True),
    (LockRequest(GOVERNANCE, LATER), LockConfiguration(), True),
    (LockRequest(legal_hold="OFF"), LockConfiguration(), True),
])
def test_lock_applies(requested: LockRequest, config: LockConfiguration | None,
                      applies: bool) -> None:
    assert lock_rules.lock_applies(requested, config) is applies


@pytest.mark.parametrize("config", [
    LockConfiguration(), LockConfiguration(DefaultRetention(GOVERNANCE, days=30)),
    LockConfiguration(DefaultRetention(COMPLIANCE, years=2)),
])
def test_lock_configuration_round_trips(config: LockConfiguration) -> None:
    assert LockConfiguration.from_json(config.to_json()) == config


@pytest.mark.parametrize("request_", [
    LockRequest(), LockRequest(GOVERNANCE, LATER, "ON"), LockRequest(legal_hold="OFF"),
])
def test_lock_request_round_trips_through_an_upload(request_: LockRequest) -> None:
    assert LockRequest.from_extra(request_.to_extra()) == request_
    assert LockRequest.from_extra({}) == LockRequest()


def test_a_marker_with_lock_fields_is_still_deletable() -> None:
    marker = replace(version(COMPLIANCE, LATER, "ON"), is_delete_marker=True)
    assert lock_rules.may_delete(marker, NOW, False, False) is None
