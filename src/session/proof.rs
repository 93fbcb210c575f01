//! What an answered beat proves about the leader's clock for our session.
//!
//! The server that expires a session is the leader, and it counts the session timeout from the
//! last *touch* that reached it. A follower touches our session when one of our requests arrives,
//! but the leader hears of that touch only in the follower's reply to the leader's next ping
//! (the leader pings every half tick). A follower cut off *towards* the leader keeps answering
//! our reads while the leader expires us: a read's answer proves nothing about the leader.
//!
//! A beat is a `sync`: the follower forwards it to the leader and answers only after the
//! leader's answer, so an answered beat proves that the leader processed it on a live session.
//! Three beats `j`, `m`, `k` answered in turn, with `m` sent at least half a tick after `j` was
//! answered, prove that `j`'s touch reached the leader before `k` did:
//! * the leader sent a ping in `(j answered, m sent)`, and the follower had `j`'s touch then;
//! * that ping is ahead of the leader's answer to `m` on the leader→follower stream, so the
//!   follower replied to it (with `j`'s touch) before it answered `m`, hence before it forwarded
//!   `k` on the follower→leader stream;
//! * the leader processed `k` on a live session, so the touch was applied: the session expires
//!   no earlier than `j`'s send time plus the session timeout.
//!
//! A reconnection between them only helps: the new server revalidates the session with the
//! leader (a touch there) after the old connection's last answer.
//!
//! The half tick is bounded by a quarter of the session timeout: ZooKeeper grants a session at
//! least two ticks (`minSessionTimeout`'s default). docs/safety.md states the assumption.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Answered beats of one session, and the send time they prove reached the leader.
#[derive(Debug)]
pub(super) struct BeatChain {
    /// The least time from one beat's answer to a later beat's send for the ping argument.
    spacing: Duration,
    /// The time from one beat's answer to the next beat's send.
    period: Duration,
    /// `(sent, answered)` of the latest answered beats, oldest first: the newest, and back to
    /// one answered `spacing` before the newest was sent.
    answered: VecDeque<(Instant, Instant)>,
}

/// At most this many answered beats are kept. Beats come a period apart, and the chain keeps
/// those within `spacing` of the newest and one before: about 7 at the default period.
const KEPT: usize = 64;

impl BeatChain {
    /// A chain for a (negotiated) session timeout of `timeout`, beating every `period` of it
    /// (a fraction, `ConnectOptions::beat_period`: a twentieth to three twentieths, 0.14 by
    /// default).
    pub(super) fn new(timeout: Duration, period: f64) -> BeatChain {
        BeatChain {
            spacing: spacing(timeout),
            period: timeout.mul_f64(period).max(Duration::from_millis(10)),
            answered: VecDeque::new(),
        }
    }

    /// The time from a beat's answer to the next beat's send: the fraction of the timeout (at
    /// least 10 ms). The proven contact then lags the latest answer by `spacing` rounded up to
    /// whole periods plus one to two periods (and round trips): 0.3 to 0.35 of the timeout at a
    /// twentieth (the shortest), 0.42 to 0.44 at 0.14 (the default), 0.45 to 0.6 at three
    /// twentieths (the longest).
    pub(super) fn period(&self) -> Duration {
        self.period
    }

    /// The least time from one beat's answer to a later beat's send for the ping argument: a
    /// quarter of the timeout.
    pub(super) fn spacing(&self) -> Duration {
        self.spacing
    }

    /// Records that a beat sent at `sent` was answered at `at`; returns the latest send time
    /// proven to have reached the leader, if any.
    pub(super) fn answered(&mut self, sent: Instant, at: Instant) -> Option<Instant> {
        // `m`: the latest beat answered before this one (`k`) was sent.
        let proven =
            self.answered.iter().rev().find(|(_, answered)| *answered <= sent).and_then(|&(m_sent, _)| {
                // `j`: the latest beat answered at least `spacing` before `m` was sent.
                self.answered
                    .iter()
                    .rev()
                    .find(|(_, answered)| *answered + self.spacing <= m_sent)
                    .map(|&(j_sent, _)| j_sent)
            });
        if self.answered.len() == KEPT {
            // Beats in quick succession: this one takes the newest's place (any entry may be
            // left out: a proof from the rest is still a proof, only maybe an older one).
            self.answered.pop_back();
        }
        self.answered.push_back((sent, at));
        // A later beat's `m` is this one or newer: an entry is never again the latest `j` once
        // the entry after it qualifies for this one.
        while self.answered.len() > 1 && self.answered[1].1 + self.spacing <= sent {
            self.answered.pop_front();
        }
        proven
    }
}

/// A quarter of the session timeout (at least 10 ms): ZooKeeper's leader pings every half tick,
/// and a session is granted at least two ticks.
fn spacing(timeout: Duration) -> Duration {
    (timeout / 4).max(Duration::from_millis(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn the_third_spaced_beat_proves_the_first() {
        let base = Instant::now();
        let mut chain = BeatChain::new(Duration::from_millis(4_000), 0.05); // spacing 1 s
        assert_eq!(chain.answered(at(base, 0), at(base, 10)), None);
        // `m` sent 1 s after the first answer: the first is not proven yet (no `k`).
        assert_eq!(chain.answered(at(base, 1_010), at(base, 1_020)), None);
        assert_eq!(chain.answered(at(base, 2_020), at(base, 2_030)), Some(at(base, 0)));
        assert_eq!(chain.answered(at(base, 3_030), at(base, 3_040)), Some(at(base, 1_010)));
    }

    #[test]
    fn beats_closer_than_the_spacing_prove_an_older_beat_or_nothing() {
        let base = Instant::now();
        let mut chain = BeatChain::new(Duration::from_millis(4_000), 0.05);
        assert_eq!(chain.answered(at(base, 0), at(base, 10)), None);
        // `m` sent 500 ms after the first answer: no ping is known to lie between them.
        assert_eq!(chain.answered(at(base, 510), at(base, 520)), None);
        assert_eq!(chain.answered(at(base, 530), at(base, 540)), None);
        // `m` (sent at 1,030) is 1 s after the first answer: the first is proven, not later ones.
        assert_eq!(chain.answered(at(base, 1_030), at(base, 1_040)), None);
        assert_eq!(chain.answered(at(base, 1_050), at(base, 1_060)), Some(at(base, 0)));
    }

    #[test]
    fn a_beat_answered_after_the_next_was_sent_is_no_witness() {
        let base = Instant::now();
        let mut chain = BeatChain::new(Duration::from_millis(4_000), 0.05);
        chain.answered(at(base, 0), at(base, 10));
        chain.answered(at(base, 1_010), at(base, 3_000));
        // Sent before the previous beat's answer: that beat cannot serve as `m`, and the first
        // beat's answer is not `spacing` before its own send.
        assert_eq!(chain.answered(at(base, 900), at(base, 3_010)), None);
    }

    #[test]
    fn the_period_is_the_fraction_of_the_negotiated_timeout_at_least_10_ms() {
        let ms = Duration::from_millis;
        assert_eq!(BeatChain::new(ms(4_000), 0.05).period(), ms(200));
        assert_eq!(BeatChain::new(ms(4_000), 0.15).period(), ms(600));
        assert_eq!(BeatChain::new(ms(100), 0.05).period(), ms(10));
    }

    #[test]
    fn at_three_twentieths_each_proof_is_of_the_beat_three_back() {
        let base = Instant::now();
        // 4 s at three twentieths: beats 600 ms after each answer (more than the 1 s spacing
        // only two together), each answered 10 ms after its send.
        let mut chain = BeatChain::new(Duration::from_millis(4_000), 0.15);
        let mut sent = 0;
        let mut proofs = Vec::new();
        for _ in 0..6 {
            proofs.push(chain.answered(at(base, sent), at(base, sent + 10)));
            sent += 10 + chain.period().as_millis() as u64;
        }
        // Sent at 0, 610, 1,220, 1,830, 2,440, 3,050: `m` must be sent 1 s after `j`'s answer,
        // so the first proof (of 0) comes with the beat sent at 1,830.
        assert_eq!(proofs, [None, None, None, Some(at(base, 0)), Some(at(base, 610)), Some(at(base, 1_220))]);
    }

    /// The lag the docs give (`Session::last_contact`, docs/safety.md): on a steady chain of
    /// beats, the proven contact trails the latest answer by 0.3 to 0.35 of the timeout at the
    /// shortest period, by 0.42 to 0.44 at the default (0.14), and by 0.45 to 0.6 at the
    /// longest. The window (`safe_until`) is then
    /// the timeout minus that lag minus the time since the latest answer (up to a period).
    #[test]
    fn a_steady_chain_lags_its_latest_answer_by_the_documented_fraction() {
        let base = Instant::now();
        for (period, low, high) in [(0.05, 0.30, 0.35), (0.14, 0.42, 0.44), (0.15, 0.45, 0.60)] {
            for round_trip in [1, 5, 20] {
                let timeout = Duration::from_millis(4_000);
                let mut chain = BeatChain::new(timeout, period);
                let mut sent = 0;
                let mut lags = Vec::new();
                for _ in 0..200 {
                    let answered = sent + round_trip;
                    if let Some(proven) = chain.answered(at(base, sent), at(base, answered)) {
                        lags.push((at(base, answered) - proven).as_secs_f64() / timeout.as_secs_f64());
                    }
                    sent = answered + chain.period().as_millis() as u64;
                }
                assert!(
                    lags.len() > 150,
                    "period {period}, round trip {round_trip} ms: {} proofs",
                    lags.len()
                );
                for lag in lags {
                    assert!(
                        (low..=high).contains(&lag),
                        "period {period}, round trip {round_trip} ms: a lag of {lag:.3} of the timeout"
                    );
                }
            }
        }
    }

    #[test]
    fn beats_in_quick_succession_prove_once_the_spacing_has_passed_and_stay_few() {
        let base = Instant::now();
        let mut chain = BeatChain::new(Duration::from_millis(4_000), 0.05); // spacing 1 s
        let mut proven = None;
        // A beat every 2 ms for 3 s (each answered 1 ms after its send).
        for i in 0..1_500 {
            let sent = at(base, 2 * i);
            if let Some(p) = chain.answered(sent, sent + Duration::from_millis(1)) {
                proven = Some(p);
            }
            assert!(chain.answered.len() <= KEPT, "{} kept", chain.answered.len());
        }
        // Proofs came, each of a beat answered at least the spacing before a later one's send.
        assert!(proven.is_some_and(|p| p >= at(base, 1_000) && p <= at(base, 1_996)), "{proven:?}");
    }
}
