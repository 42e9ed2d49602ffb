"""Object lock rules: what retention and legal hold allow, and what a bucket's default
retention gives a new version.

Pure: no I/O, no Twisted, no clock of its own (callers pass `now`, float seconds since the
epoch). Every path that deletes or overwrites a version (DeleteObject, DeleteObjects, the
lifecycle worker, an overwrite of the null version, CompleteMultipartUpload) asks
`may_delete`; PutObjectRetention asks `may_change_retention`. A refusal is a reason (str),
which callers turn into AccessDenied; None means allowed.

The rules (AWS's, and the spec's "Errors" 4):
* a delete marker can always be deleted;
* legal hold ON blocks deletion, and nothing bypasses it;
* an active COMPLIANCE retention blocks deletion, shortening, removal and a change of mode
  until it expires; nothing bypasses it;
* an active GOVERNANCE retention blocks the same, unless the request says
  `x-amz-bypass-governance-retention: true` AND the caller holds
  s3:BypassGovernanceRetention (`may_bypass`);
* extending a retention (same mode, later or equal date) is always allowed;
* an expired retention no longer protects anything.
"""

from __future__ import annotations

import calendar
import datetime
import json
from dataclasses import dataclass, replace

from objstore.convergence.lww import stamp_write
from objstore.dataclass_replace import fast_replace
from objstore.meta.records import ObjectRecord

GOVERNANCE = "GOVERNANCE"
COMPLIANCE = "COMPLIANCE"
MODES = frozenset({GOVERNANCE, COMPLIANCE})
HOLD_ON = "ON"
HOLD_OFF = "OFF"
HOLD_STATUSES = frozenset({HOLD_ON, HOLD_OFF})
MAX_RETENTION_DAYS = 36500
MAX_RETENTION_YEARS = 100
DAY_SECONDS = 86400

PROTECTED_MESSAGE = "Access Denied because object protected by object lock."


# -- the model ------------------------------------------------------------------------


@dataclass(frozen=True)
class DefaultRetention:
    """The default retention of a bucket's object lock configuration: a mode and exactly
    one of days or years (validated by the S3 layer when parsed)."""

    mode: str
    days: int | None = None
    years: int | None = None

    def until(self, now: float) -> float:
        """The retain-until date of a version created at `now`. Years are calendar years
        (29 February becomes 28 February in a year without one)."""
        if self.days is not None:
            return now + self.days * DAY_SECONDS
        return add_years(now, self.years or 0)


@dataclass(frozen=True)
class LockConfiguration:
    """A bucket's object lock configuration (object lock itself is on when one exists)."""

    default: DefaultRetention | None = None

    def to_json(self) -> str:
        if self.default is None:
            return json.dumps({"enabled": True})
        rule = {"mode": self.default.mode, "days": self.default.days,
                "years": self.default.years}
        return json.dumps({"enabled": True, "default": rule}, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> LockConfiguration:
        data = json.loads(text)
        rule = data.get("default")
        if not rule:
            return LockConfiguration()
        return LockConfiguration(DefaultRetention(rule["mode"], rule.get("days"),
                                                  rule.get("years")))


@dataclass(frozen=True)
class LockRequest:
    """The lock a write asks for (x-amz-object-lock-mode, -retain-until-date, -legal-hold
    on PutObject, CopyObject and CreateMultipartUpload); all None when it asks for none.
    Mode and date come together (the S3 layer checks)."""

    mode: str | None = None
    retain_until_date: float | None = None
    legal_hold: str | None = None

    @property
    def is_empty(self) -> bool:
        return self.mode is None and self.retain_until_date is None and self.legal_hold is None

    def to_extra(self) -> dict[str, object]:
        return {"lock_mode": self.mode, "lock_until": self.retain_until_date,
                "lock_hold": self.legal_hold}

    @staticmethod
    def from_extra(extra: dict[str, object]) -> LockRequest:
        until = extra.get("lock_until")
        mode, hold = extra.get("lock_mode"), extra.get("lock_hold")
        return LockRequest(
            mode=mode if isinstance(mode, str) else None,
            retain_until_date=float(until) if isinstance(until, int | float) else None,
            legal_hold=hold if isinstance(hold, str) else None,
        )


@dataclass(frozen=True)
class Retention:
    """A retention to set: mode and date, or both None to remove it."""

    mode: str | None = None
    until: float | None = None


# -- time -----------------------------------------------------------------------------


def add_years(timestamp: float, years: int) -> float:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    year = moment.year + years
    day = min(moment.day, calendar.monthrange(year, moment.month)[1])
    return moment.replace(year=year, day=day).timestamp()


def retention_active(record: ObjectRecord, now: float) -> bool:
    return (record.retention_mode in MODES and record.retain_until_date is not None
            and record.retain_until_date > now)


def governance_applies(record: ObjectRecord, now: float) -> bool:
    """True when a bypass permission would matter for this version: an active GOVERNANCE
    retention (callers ask the authorizer only then)."""
    return retention_active(record, now) and record.retention_mode == GOVERNANCE


# -- decisions ------------------------------------------------------------------------


def may_delete(
    record: ObjectRecord, now: float, bypass_governance: bool, may_bypass: bool
) -> str | None:
    """Why `record` may not be deleted (or overwritten) now, or None when it may."""
    if record.is_delete_marker:
        return None
    if record.legal_hold_status == HOLD_ON:
        return "the version is under a legal hold"
    if not retention_active(record, now):
        return None
    if record.retention_mode == COMPLIANCE:
        return "the version is under a COMPLIANCE retention"
    return _governance_refusal(bypass_governance, may_bypass)


def may_change_retention(
    record: ObjectRecord, new: Retention, now: float, bypass_governance: bool,
    may_bypass: bool,
) -> str | None:
    """Why the retention of `record` may not become `new`, or None when it may. Extending
    (same mode, same or later date) is always allowed; anything else touching an active
    retention (shorter date, removal, another mode) is governed by its mode."""
    if not retention_active(record, now):
        return None
    assert record.retain_until_date is not None
    if new.mode == record.retention_mode and new.until is not None \
            and new.until >= record.retain_until_date:
        return None
    if record.retention_mode == COMPLIANCE:
        return "a COMPLIANCE retention cannot be shortened, removed or changed"
    return _governance_refusal(bypass_governance, may_bypass)


def _governance_refusal(bypass_governance: bool, may_bypass: bool) -> str | None:
    if bypass_governance and may_bypass:
        return None
    if bypass_governance:
        return "the caller may not bypass the GOVERNANCE retention"
    return "the version is under a GOVERNANCE retention"


def future_date_problem(until: float | None, now: float) -> str | None:
    """A retain-until date must lie in the future."""
    if until is not None and until <= now:
        return "The retain until date must be in the future!"
    return None


# -- new versions and changes ---------------------------------------------------------


def initial_lock(
    requested: LockRequest, config: LockConfiguration | None, now: float
) -> tuple[str | None, float | None, str | None]:
    """(retention_mode, retain_until_date, legal_hold_status) of a new version: what the
    write asked for, else the bucket's default retention. A legal hold is set only when
    asked for."""
    mode, until = requested.mode, requested.retain_until_date
    if mode is None and config is not None and config.default is not None:
        mode, until = config.default.mode, config.default.until(now)
    return mode, until, requested.legal_hold


def with_lock(record: ObjectRecord, requested: LockRequest, config: LockConfiguration | None,
              now: float) -> ObjectRecord:
    """`record` carrying its initial lock state (lock_updated_at stays unset: the lock was
    not changed, it was born with the version)."""
    mode, until, hold = initial_lock(requested, config, now)
    if (mode, until, hold) == (record.retention_mode, record.retain_until_date,
                               record.legal_hold_status):
        return record  # no lock: most writes, which need no copy
    return fast_replace(record, retention_mode=mode, retain_until_date=until,
                        legal_hold_status=hold)


def with_retention(record: ObjectRecord, new: Retention, now: float) -> ObjectRecord:
    """The version with a new retention, its lock stamp strictly after the one it replaces
    (`lww.stamp_write`: a node whose clock lags still orders its change after the last)."""
    return replace(record, retention_mode=new.mode, retain_until_date=new.until,
                   lock_updated_at=stamp_write(now, record.lock_updated_at))


def with_legal_hold(record: ObjectRecord, status: str, now: float) -> ObjectRecord:
    """The version with a new legal hold status, stamped as `with_retention`."""
    return replace(record, legal_hold_status=status,
                   lock_updated_at=stamp_write(now, record.lock_updated_at))


def lock_applies(requested: LockRequest, config: LockConfiguration | None) -> bool:
    """True when a new version would carry lock parameters (a retention, asked for or by
    default, or a legal hold): such writes need an integrity header, as on AWS."""
    if not requested.is_empty:
        return True
    return config is not None and config.default is not None
