//! What the workers answered, what the stores hold at the end, and the verdict.

use crate::protocol::Reply;
use crate::Settings;

/// The paused holder's late writes, and what its guard said right after the resume.
#[derive(Clone, Debug, Default)]
pub struct Late {
    pub user: String,
    pub token: i64,
    /// "refused", "landed" or "error".
    pub redis: String,
    pub redis_detail: String,
    pub postgres: String,
    pub postgres_detail: String,
    pub ensure_safe: String,
    pub status: String,
}

impl Late {
    pub fn from_reply(r: &Reply) -> Late {
        Late {
            user: r.get("user").into(),
            token: r.num("token").unwrap_or_default(),
            redis: r.get("redis").into(),
            redis_detail: r.get("redis_detail").into(),
            postgres: r.get("postgres").into(),
            postgres_detail: r.get("postgres_detail").into(),
            ensure_safe: r.get("ensure_safe").into(),
            status: r.get("status").into(),
        }
    }

    pub fn both_refused(&self) -> bool {
        self.redis == "refused" && self.postgres == "refused"
    }

    /// Whether the guard still claimed the hold after the resume (it must not).
    pub fn claims_safe(&self) -> bool {
        self.status == "Held" || self.ensure_safe.starts_with("Ok")
    }

    pub fn print(&self, worker: usize, user: &str, newer: i64, fenced: bool) {
        let word = |kind: &str| match kind {
            "refused" => "REFUSED",
            "landed" => "LANDED",
            _ => "FAILED",
        };
        if fenced {
            println!(
                "  [worker {worker}] resumed; its late writes for {user}, fenced with token {} \
                 (the fence is at {newer}):",
                self.token
            );
        } else {
            println!(
                "  [worker {worker}] resumed; its late writes for {user}, unfenced (its token {} is \
                 older than {newer}, and no store checks it):",
                self.token
            );
        }
        println!("    Redis stock decrement: {} ({})", word(&self.redis), self.redis_detail);
        println!("    PostgreSQL order:      {} ({})", word(&self.postgres), self.postgres_detail);
        println!(
            "  right after the resume: ensure_safe -> {}; current_status() -> {}",
            self.ensure_safe, self.status
        );
    }
}

/// Every answer of the run.
#[derive(Debug, Default)]
pub struct Tally {
    pub bought: usize,
    pub already_ordered: usize,
    pub sold_out: usize,
    pub failed: Vec<String>,
    /// The lowest stock a sale reported left.
    pub lowest_left: Option<i64>,
    pub pause_seen: bool,
    pub takeover: Option<Reply>,
    pub late: Option<Late>,
}

impl Tally {
    pub fn add_all(&mut self, answers: Vec<(usize, Reply)>) {
        for (worker, r) in answers {
            match r.get("outcome") {
                "bought" => {
                    self.bought += 1;
                    if let Some(left) = r.num("left") {
                        self.lowest_left = Some(self.lowest_left.map_or(left, |l| l.min(left)));
                    }
                }
                "already-ordered" => self.already_ordered += 1,
                "sold-out" => self.sold_out += 1,
                _ => self.failed.push(format!("worker {worker}, {}: {}", r.get("user"), r.get("detail"))),
            }
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "so far: {} bought, {} refused as already ordered, {} found the stock sold out, {} failed",
            self.bought,
            self.already_ordered,
            self.sold_out,
            self.failed.len()
        )
    }
}

/// What the stores hold after the sale.
#[derive(Debug)]
pub struct FinalState {
    /// The Redis stock left.
    pub stock_left: i64,
    /// Orders in PostgreSQL for the item.
    pub orders: i64,
    /// Users with more than one order, and how many each.
    pub doubles: Vec<(String, i64)>,
    /// Each order's user and the fencing token it was written with.
    pub tokens: Vec<(String, i64)>,
}

/// Prints the report; returns whether the run passed (always true for `--unfenced`, a
/// demonstration).
pub fn verdict(settings: &Settings, stock: i64, tally: &Tally, state: &FinalState) -> bool {
    let sold = stock - state.stock_left;
    let mut problems = Vec::new();
    println!("\nReport ({} writes):", if settings.fenced { "fenced" } else { "UNFENCED" });
    println!(
        "  stock {stock}; Redis says {} left: {sold} sold; PostgreSQL holds {} orders",
        state.stock_left, state.orders
    );
    println!(
        "  purchases answered: {} bought, {} already ordered, {} sold out, {} failed",
        tally.bought,
        tally.already_ordered,
        tally.sold_out,
        tally.failed.len()
    );
    for f in &tally.failed {
        println!("    failed: {f}");
    }
    if sold > stock || state.orders > stock {
        problems.push(format!("OVERSOLD: {sold} sold and {} orders from a stock of {stock}", state.orders));
    }
    if state.doubles.is_empty() {
        println!("  users with more than one order: none");
    } else {
        let list: Vec<String> = state.doubles.iter().map(|(u, n)| format!("{u} has {n}")).collect();
        println!("  users with more than one order: {}", list.join(", "));
        problems.push(format!("{} user(s) with more than one order", state.doubles.len()));
    }
    let lowest = tally.lowest_left.map_or(state.stock_left, |l| l.min(state.stock_left));
    println!("  stock never negative: {} (lowest seen {lowest})", if lowest >= 0 { "yes" } else { "NO" });
    if lowest < 0 {
        problems.push(format!("the stock went negative ({lowest})"));
    }
    if sold != state.orders {
        problems.push(format!(
            "{sold} items left the stock for {} orders: {} item(s) sold without an order of their \
             own (a second sale to a user who has one)",
            state.orders,
            sold - state.orders
        ));
    }
    match &tally.late {
        None => problems.push("the pause did not happen (no late writes reported)".into()),
        Some(late) => {
            println!(
                "  the paused holder's late writes (token {}): Redis {}, PostgreSQL {}",
                late.token,
                late.redis.to_uppercase(),
                late.postgres.to_uppercase()
            );
            if late.both_refused() {
                println!(
                    "  the paused holder's writes were both refused (StaleToken from Redis and from \
                     PostgreSQL)"
                );
            } else {
                let landed: Vec<&str> = [("Redis", &late.redis), ("PostgreSQL", &late.postgres)]
                    .into_iter()
                    .filter(|(_, k)| k.as_str() == "landed")
                    .map(|(s, _)| s)
                    .collect();
                if !landed.is_empty() {
                    println!("  the paused holder's late write landed in {}", landed.join(" and "));
                }
                problems.push(format!(
                    "the paused holder's writes were not both refused (Redis: {}, PostgreSQL: {})",
                    late.redis, late.postgres
                ));
            }
            let order = state.tokens.iter().find(|(u, _)| *u == late.user).map(|(_, t)| *t);
            println!(
                "  {}'s order carries token {}",
                late.user,
                order.map_or("(no order)".into(), |t| t.to_string())
            );
            if order == Some(late.token) {
                problems.push(format!(
                    "{}'s order was overwritten by the paused holder's late write (stale token {})",
                    late.user, late.token
                ));
            }
            if late.claims_safe() {
                problems.push(format!(
                    "after the resume the guard still claimed the hold (ensure_safe {}, status {})",
                    late.ensure_safe, late.status
                ));
            }
        }
    }
    if tally.takeover.as_ref().map(|r| r.get("outcome")) != Some("bought") {
        problems.push("no other worker completed the paused user's purchase during the pause".into());
    }
    if !tally.pause_seen {
        problems.push("the paused worker was never seen stopped".into());
    }
    println!();
    if settings.fenced {
        if problems.is_empty() {
            println!(
                "Flash sale passed: no oversell, one order per user, the paused holder's late writes \
                 refused by both stores."
            );
            true
        } else {
            for p in &problems {
                println!("FAILED: {p}");
            }
            false
        }
    } else {
        println!("The damage without fencing (a demonstration; the per-user lock alone did not stop it):");
        for p in &problems {
            println!("  DAMAGE: {p}");
        }
        if problems.is_empty() {
            println!("  none this time");
        }
        true
    }
}
