//! The option phases' records in the JSON history (`--history`): times in seconds since the
//! run's epoch, as everywhere in it.

use crate::options_check::{Gone, OptHistory};
use crate::report::{json_str, secs};

/// `{"queue_events":[..],"sessions":[..],"witness":{"listings":[..],"gone":[..],
/// "sessions":[..]},"limited":[..],"asked":[..],"told":[..],"observed":[..]}`.
pub fn json(o: &OptHistory) -> String {
    let join = |items: Vec<String>| items.join(",");
    let qevs = join(
        o.qevs
            .iter()
            .map(|e| {
                format!(
                    "{{\"worker\":{},\"pid\":{},\"attempt\":{},\"event\":{},\"num\":{},\"node\":{},\
                     \"watching\":{},\"at\":{}}}",
                    json_str(&e.worker),
                    e.pid,
                    e.attempt,
                    json_str(&e.kind),
                    e.num,
                    json_str(&e.node),
                    json_str(&e.watching),
                    secs(e.at)
                )
            })
            .collect(),
    );
    let sessions = join(
        o.conns
            .iter()
            .map(|(w, pid, state, at)| {
                format!(
                    "{{\"worker\":{},\"pid\":{pid},\"state\":{},\"at\":{}}}",
                    json_str(w),
                    json_str(state),
                    secs(*at)
                )
            })
            .collect(),
    );
    let listings = join(
        o.listings
            .iter()
            .map(|(at, children)| {
                let children: Vec<String> = children.iter().map(|c| json_str(c)).collect();
                format!("{{\"sent\":{},\"children\":[{}]}}", secs(*at), children.join(","))
            })
            .collect(),
    );
    let gone = join(
        o.gone
            .iter()
            .map(|(node, (how, at))| {
                let how = if *how == Gone::Clean { "clean" } else { "unclean" };
                format!("{{\"node\":{},\"gone\":\"{how}\",\"heard\":{}}}", json_str(node), secs(*at))
            })
            .collect(),
    );
    let witness_sessions = join(
        o.witness_conns
            .iter()
            .map(|(state, at)| format!("{{\"state\":{},\"at\":{}}}", json_str(state), secs(*at)))
            .collect(),
    );
    let limited = join(
        o.limited
            .iter()
            .map(|(w, res, token, limit)| {
                format!(
                    "{{\"worker\":{},\"resource\":{},\"token\":{token},\"limit_ms\":{}}}",
                    json_str(w),
                    json_str(res),
                    limit.as_millis()
                )
            })
            .collect(),
    );
    let asked = join(
        o.asks
            .iter()
            .map(|(w, res, token, sent, answered)| {
                format!(
                    "{{\"asker\":{},\"resource\":{},\"token\":{token},\"sent\":{},\"answered\":{}}}",
                    json_str(w),
                    json_str(res),
                    secs(*sent),
                    secs(*answered)
                )
            })
            .collect(),
    );
    let told = join(
        o.told
            .iter()
            .map(|(w, res, token, at)| {
                format!(
                    "{{\"worker\":{},\"resource\":{},\"token\":{token},\"at\":{}}}",
                    json_str(w),
                    json_str(res),
                    secs(*at)
                )
            })
            .collect(),
    );
    let observed = join(
        o.obs
            .iter()
            .map(|(w, pid, token, at)| {
                let token = token.map_or("null".into(), |t| t.to_string());
                format!("{{\"worker\":{},\"pid\":{pid},\"token\":{token},\"at\":{}}}", json_str(w), secs(*at))
            })
            .collect(),
    );
    format!(
        "{{\"queue_events\":[{qevs}],\"sessions\":[{sessions}],\"witness\":{{\"listings\":[{listings}],\
         \"gone\":[{gone}],\"sessions\":[{witness_sessions}]}},\"limited\":[{limited}],\"asked\":[{asked}],\
         \"told\":[{told}],\"observed\":[{observed}]}}"
    )
}
