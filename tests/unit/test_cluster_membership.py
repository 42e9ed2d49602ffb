"""The peer verdict table, the per-peer state machine (an injected clock: `now` passed in),
the one eligibility predicate, pruning and the worker leader."""

from __future__ import annotations

import pytest

from objstore.cluster import membership
from objstore.cluster.membership import (
    Membership,
    PeerEvent,
    PeerState,
    ProbeResult,
    Verdict,
)

T = 1_900_000_000.0
SELF = "node-b"
GOOD = ProbeResult(200, mac_ok=True, fingerprint_ok=True, node_id="node-a",
                   disk_total=100, disk_available=40, max_seq=7, clock_offset_seconds=0.1)
DRIFTED = ProbeResult(200, mac_ok=True, fingerprint_ok=False, node_id="node-a")
UNTRUSTED = ProbeResult(200, mac_ok=False, node_id="node-a", disk_available=0, max_seq=0)
REJECTED = ProbeResult(403, node_id="node-a")
LEGACY = ProbeResult(404, node_id="node-a")
LOOP = ProbeResult(409)
DOWN = ProbeResult(None)


def fresh() -> PeerState:
    return PeerState(address="http://a:9000", first_seen=T)


def run(*results: ProbeResult, start: PeerState | None = None
        ) -> tuple[PeerState, list[tuple[PeerEvent, ...]]]:
    peer, log = start or fresh(), []
    for i, result in enumerate(results):
        peer, events = membership.observe(peer, result, now=T + i, self_id=SELF)
        log.append(events)
    return peer, log


# -- the verdict table ----------------------------------------------------------------


@pytest.mark.parametrize("result, verdict", [
    (GOOD, Verdict.AUTHENTICATED), (DRIFTED, Verdict.AUTHENTICATED),
    (UNTRUSTED, Verdict.UNTRUSTED), (ProbeResult(200), Verdict.UNTRUSTED),
    (REJECTED, Verdict.REJECTED), (LEGACY, Verdict.LEGACY), (LOOP, Verdict.SELF),
    (ProbeResult(200, mac_ok=True, node_id=SELF), Verdict.SELF),
    (ProbeResult(200, mac_ok=False, node_id=SELF), Verdict.UNTRUSTED),
    (DOWN, Verdict.FAILED), (ProbeResult(500), Verdict.FAILED),
    (ProbeResult(503), Verdict.FAILED), (ProbeResult(401), Verdict.FAILED),
])
def test_each_probe_outcome_gets_its_verdict(result: ProbeResult, verdict: Verdict) -> None:
    assert membership.classify(result, SELF) is verdict


@pytest.mark.parametrize("result, alive, authenticated, config_ok, is_eligible", [
    (GOOD, True, True, True, True),
    (DRIFTED, True, True, False, False),
    (UNTRUSTED, True, False, None, False),
    (REJECTED, True, False, False, False),
    (LEGACY, True, False, None, False),
    (LOOP, False, False, None, False),
])
def test_a_verdict_sets_the_peer_view(result: ProbeResult, alive: bool, authenticated: bool,
                                      config_ok: bool | None, is_eligible: bool) -> None:
    peer, _ = run(result)
    assert (peer.alive, peer.authenticated, peer.config_ok) == (alive, authenticated,
                                                               config_ok)
    assert membership.eligible(peer) is is_eligible


def test_a_legacy_peer_and_a_loop_are_flagged() -> None:
    assert run(LEGACY)[0].legacy and not run(GOOD)[0].legacy
    assert run(LOOP)[0].is_self and not run(GOOD)[0].is_self


def test_a_peer_that_rejects_our_secret_stays_visible_with_its_identity() -> None:
    peer, _ = run(GOOD, REJECTED)
    assert peer.alive and peer.config_ok is False and peer.node_id == "node-a"
    assert not membership.eligible(peer)


def test_only_an_authenticated_answer_reports_figures() -> None:
    peer, _ = run(GOOD, UNTRUSTED)
    assert (peer.disk_available, peer.max_seq) == (40, 7)  # the impostor's zeros ignored


# -- liveness -------------------------------------------------------------------------


def test_dead_after_two_consecutive_failures_with_the_last_view_kept_between() -> None:
    peer, log = run(GOOD, DOWN)
    assert peer.alive and membership.eligible(peer) and log[1] == ()
    peer, log = run(DOWN, start=peer)
    assert not peer.alive and not peer.authenticated and not membership.eligible(peer)
    assert log == [(PeerEvent.DEAD,)]
    assert peer.last_seen == T  # last successful contact, kept


def test_failures_that_are_not_consecutive_do_not_kill() -> None:
    peer, _ = run(GOOD, DOWN, GOOD, DOWN, GOOD, DOWN)
    assert peer.alive and membership.eligible(peer)


def test_alive_again_at_the_first_success_and_authenticated_anew() -> None:
    peer, log = run(GOOD, DOWN, DOWN, GOOD)
    assert peer.alive and membership.eligible(peer) and peer.consecutive_failures == 0
    assert set(log[3]) == {PeerEvent.ALIVE, PeerEvent.AUTHENTICATED}
    peer, _ = run(GOOD, DOWN, DOWN, UNTRUSTED)
    assert peer.alive and not membership.eligible(peer)


def test_a_dead_peer_is_never_eligible_whatever_it_was() -> None:
    peer, _ = run(GOOD, ProbeResult(500), ProbeResult(503))
    assert not membership.eligible(peer)


# -- events: one per transition -------------------------------------------------------


def test_legacy_warns_once_per_transition() -> None:
    _, log = run(LEGACY, LEGACY, LEGACY, GOOD, LEGACY, LEGACY)
    legacy_events = [i for i, events in enumerate(log) if PeerEvent.LEGACY in events]
    assert legacy_events == [0, 4]


def test_loop_untrusted_and_drift_warn_once_per_transition() -> None:
    for result, event in [(LOOP, PeerEvent.LOOP), (UNTRUSTED, PeerEvent.UNTRUSTED),
                          (DRIFTED, PeerEvent.CONFIG_DRIFT),
                          (REJECTED, PeerEvent.CONFIG_DRIFT)]:
        _, log = run(result, result, result, GOOD, result)
        assert [i for i, events in enumerate(log) if event in events] == [0, 4], event


def test_an_address_found_to_be_this_node_is_a_loop_not_a_death() -> None:
    _, log = run(GOOD, LOOP)
    assert log[1] == (PeerEvent.LOOP,)


def test_a_steady_peer_makes_no_noise() -> None:
    _, log = run(GOOD, GOOD, GOOD)
    assert log[1:] == [(), ()]


def test_a_clock_offset_past_a_second_warns_once() -> None:
    skewed = ProbeResult(200, mac_ok=True, fingerprint_ok=True, node_id="node-a",
                         clock_offset_seconds=-2.5)
    peer, log = run(GOOD, skewed, skewed, GOOD, skewed)
    assert [i for i, events in enumerate(log) if PeerEvent.CLOCK_SKEW in events] == [1, 4]
    assert peer.clock_offset_seconds == -2.5


def test_the_clock_offset_takes_the_answer_as_given_mid_probe() -> None:
    assert membership.clock_offset(sent_at=T, received_at=T + 0.2, peer_time=T + 3.1) == \
        pytest.approx(3.0)


# -- pruning --------------------------------------------------------------------------

DAY = 86400.0


def test_a_peer_unseen_past_the_prune_period_is_pruned() -> None:
    peer, _ = run(GOOD, DOWN, DOWN)  # last seen at T
    assert not membership.prune_due(peer, now=T + 7 * DAY, prune_seconds=7 * DAY)
    assert membership.prune_due(peer, now=T + 7 * DAY + 1, prune_seconds=7 * DAY)


def test_a_live_peer_is_never_pruned_and_a_never_seen_one_counts_from_discovery() -> None:
    live, _ = run(GOOD)
    assert not membership.prune_due(live, now=T + 100 * DAY, prune_seconds=DAY)
    assert membership.prune_due(fresh(), now=T + DAY + 1, prune_seconds=DAY)
    assert not membership.prune_due(fresh(), now=T + DAY, prune_seconds=DAY)


def test_membership_prunes_and_keeps_the_rest() -> None:
    view = Membership(SELF)
    view.propose(["http://a", "http://c"], now=T)
    view.observe("http://a", GOOD, now=T + 10)
    gone = view.prune(now=T + DAY + 5, prune_seconds=DAY)
    assert [p.address for p in gone] == ["http://c"]
    assert not view.peers["http://a"].pruned and view.peers["http://c"].pruned
    assert view.prune(now=T + 2 * DAY, prune_seconds=DAY) == ()  # each peer once


def test_a_peer_that_refuses_us_is_pruned_though_it_answers() -> None:
    # an mDNS node of another cluster: 403 at every probe, alive, never authenticated
    view = Membership(SELF)
    view.propose(["http://other"], now=T)
    for i in range(3):
        view.observe("http://other", REJECTED, now=T + i * DAY / 2)
    assert view.prune(now=T + DAY - 1, prune_seconds=DAY) == ()
    view.observe("http://other", REJECTED, now=T + DAY + 1)
    [gone] = view.prune(now=T + DAY + 1, prune_seconds=DAY)
    assert gone.pruned and gone.alive and gone.last_seen == T + DAY + 1
    # its answers keep it pruned: only an authenticated one brings a peer back
    assert view.observe("http://other", REJECTED, now=T + DAY + 2) == ()
    assert view.peers["http://other"].pruned and view.live_node_count() == 1
    # a member answering 403 since its last authenticated answer counts from that answer
    member, _ = run(GOOD, REJECTED, REJECTED)
    assert member.last_authenticated == T
    assert not membership.prune_due(member, now=T + DAY, prune_seconds=DAY)
    assert membership.prune_due(member, now=T + DAY + 1, prune_seconds=DAY)


def test_a_drifted_or_loop_entry_is_not_pruned() -> None:
    drifted, _ = run(DRIFTED)  # authenticated: a member with drift stays visible
    assert not membership.prune_due(drifted, now=T + 100 * DAY, prune_seconds=DAY)
    loop, _ = run(LOOP)
    assert not membership.prune_due(loop, now=T + 100 * DAY, prune_seconds=DAY)


def test_a_pruned_peer_keeps_its_last_seen_across_proposals_and_returns_when_it_answers(
        ) -> None:
    view = Membership(SELF)
    view.propose(["http://a"], now=T)
    view.observe("http://a", GOOD, now=T)
    for i in (1, 2):
        view.observe("http://a", DOWN, now=T + i)
    [gone] = view.prune(now=T + DAY + 1, prune_seconds=DAY)
    # discovery proposes it again at every tick: the pruned state and last_seen stay
    assert view.propose(["http://a"], now=T + DAY + 2) == ()
    peer = view.peers["http://a"]
    assert peer.pruned and peer.last_seen == T and peer.first_seen == T
    assert not membership.eligible(peer) and view.eligible_node_count() == 1
    assert view.observe("http://a", DOWN, now=T + DAY + 3) == ()
    # a 403 or a MAC-less answer does not bring it back; an authenticated answer does
    view.observe("http://a", UNTRUSTED, now=T + DAY + 4)
    assert view.peers["http://a"].pruned
    events = view.observe("http://a", GOOD, now=T + DAY + 5)
    assert PeerEvent.RETURNED in events and PeerEvent.AUTHENTICATED in events
    back = view.peers["http://a"]
    assert not back.pruned and membership.eligible(back)
    assert [p.node_id for p in view.eligible_peers()] == ["node-a"]


def test_a_pruned_peer_discovery_no_longer_proposes_is_forgotten() -> None:
    view = Membership(SELF)
    view.propose(["http://a", "http://c"], now=T)
    view.prune(now=T + DAY + 1, prune_seconds=DAY)
    forgotten = view.propose(["http://c"], now=T + DAY + 2)
    assert [p.address for p in forgotten] == ["http://a"] and list(view.peers) == ["http://c"]
    # an unpruned peer discovery stops proposing stays until it is pruned
    view.propose(["http://b", "http://c"], now=T + DAY + 3)
    view.observe("http://b", DOWN, now=T + DAY + 3)
    assert [p.address for p in view.propose([], now=T + DAY + 4)] == ["http://c"]
    assert list(view.peers) == ["http://b"] and not view.peers["http://b"].pruned


def test_restored_pruned_peers_stay_pruned_unless_heard_since_the_start() -> None:
    remembered = [PeerState(address=f"http://{name}", first_seen=T - 90 * DAY,
                            node_id=f"node-{name}", last_seen=T - 60 * DAY,
                            last_authenticated=T - 60 * DAY, pruned=True)
                  for name in ("a", "c", "d")]
    view = Membership(SELF)
    view.propose(["http://a", "http://c"], now=T)  # the first tick ran before the restore
    view.observe("http://a", GOOD, now=T)
    view.observe("http://c", DOWN, now=T)
    view.restore_pruned(remembered)
    assert not view.peers["http://a"].pruned  # answered since the start: back
    c, d = view.peers["http://c"], view.peers["http://d"]
    assert c.pruned and c.last_seen == T - 60 * DAY and c.first_seen == T - 90 * DAY
    assert c.node_id == "node-c" and not c.alive
    assert d.pruned and d.last_seen == T - 60 * DAY and not membership.eligible(d)
    assert view.prune(now=T + 1, prune_seconds=DAY) == ()  # already pruned: not again


# -- the membership view --------------------------------------------------------------


def answer(node_id: str, *, mac: bool = True, fingerprint: bool = True) -> ProbeResult:
    return ProbeResult(200, mac_ok=mac, fingerprint_ok=fingerprint, node_id=node_id,
                       disk_available=10)


def test_discovery_only_proposes_trust_comes_from_authentication() -> None:
    view = Membership(SELF)
    view.propose(["http://a", "http://c"], now=T)
    assert view.eligible_peers() == () and view.eligible_node_count() == 1
    view.observe("http://a", answer("node-a"), now=T)
    view.observe("http://c", answer("node-c", mac=False), now=T)
    assert [p.node_id for p in view.eligible_peers()] == ["node-a"]
    assert view.eligible_node_count() == 2 and view.live_node_count() == 3


def test_a_node_reachable_under_two_addresses_counts_once() -> None:
    view = Membership(SELF)
    view.observe("http://10.0.0.1:9000", answer("node-a"), now=T)
    view.observe("http://node-a.local:9000", answer("node-a"), now=T + 1)
    assert view.eligible_node_count() == 2 and view.live_node_count() == 2
    assert view.eligible_peers()[0].address == "http://node-a.local:9000"  # newest


def test_this_node_under_another_address_never_counts() -> None:
    view = Membership(SELF)
    view.observe("http://127.0.0.1:9000", LOOP, now=T)
    view.observe("http://me:9000", answer(SELF), now=T)
    assert view.eligible_node_count() == 1 and view.live_node_count() == 1
    assert all(p.is_self for p in view.peers.values())


def test_drifted_and_dead_peers_stay_visible_but_do_not_count() -> None:
    view = Membership(SELF)
    view.observe("http://a", answer("node-a", fingerprint=False), now=T)
    view.observe("http://c", answer("node-c"), now=T)
    view.observe("http://c", DOWN, now=T + 1)
    view.observe("http://c", DOWN, now=T + 2)
    assert len(view.peers) == 2 and view.eligible_node_count() == 1


# -- the worker leader ----------------------------------------------------------------


def test_a_single_node_always_leads() -> None:
    assert membership.worker_leader("node-z", []) == "node-z"
    assert Membership("node-z").worker_leader() == "node-z"


def test_the_lowest_eligible_node_id_leads_and_an_ineligible_one_never() -> None:
    view = Membership(SELF)
    view.observe("http://c", answer("node-c"), now=T)
    assert view.worker_leader() == SELF
    view.observe("http://a", answer("node-a", fingerprint=False), now=T)
    assert view.worker_leader() == SELF  # node-a drifted: not eligible
    view.observe("http://a", answer("node-a"), now=T + 1)
    assert view.worker_leader() == "node-a"
    view.observe("http://a", DOWN, now=T + 2)
    view.observe("http://a", DOWN, now=T + 3)
    assert view.worker_leader() == SELF  # failover once node-a is dead
