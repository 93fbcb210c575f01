//! Cycles in a directed graph between session ids: which vertices lie on one (strongly
//! connected components), who reaches them, and every elementary cycle, bounded. Pure, and
//! generic over what an edge carries.

use std::collections::{BTreeMap, BTreeSet};

/// Edges: `graph[from][to]` is what the edge carries.
pub(crate) type Graph<E> = BTreeMap<i64, BTreeMap<i64, E>>;

/// The most DFS steps spent enumerating cycles (their number can grow exponentially).
const CYCLE_STEPS: usize = 200_000;

fn reversed<E>(graph: &Graph<E>) -> BTreeMap<i64, Vec<i64>> {
    let mut reversed: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (&from, tos) in graph {
        for &to in tos.keys() {
            reversed.entry(to).or_default().push(from);
        }
    }
    reversed
}

/// The vertices that lie on a cycle: in a strongly connected component of two or more (the
/// graph has no self-loops).
pub(crate) fn in_cycles<E>(graph: &Graph<E>) -> BTreeSet<i64> {
    // Kosaraju: the finish order of a depth-first search, then components on the reversed
    // graph in reverse finish order.
    let reversed = reversed(graph);
    let successors = |v: i64| graph.get(&v).map_or_else(Vec::new, |t| t.keys().copied().collect::<Vec<_>>());
    let vertices: BTreeSet<i64> = graph.keys().chain(reversed.keys()).copied().collect();
    let mut seen = BTreeSet::new();
    let mut order = Vec::with_capacity(vertices.len());
    for &start in &vertices {
        if !seen.insert(start) {
            continue;
        }
        let mut stack = vec![(start, successors(start))];
        while let Some((v, next)) = stack.last_mut() {
            match next.pop() {
                Some(to) if seen.insert(to) => stack.push((to, successors(to))),
                Some(_) => {}
                None => {
                    order.push(*v);
                    stack.pop();
                }
            }
        }
    }
    let mut assigned = BTreeSet::new();
    let mut cyclic = BTreeSet::new();
    for &start in order.iter().rev() {
        if !assigned.insert(start) {
            continue;
        }
        let (mut component, mut stack) = (vec![start], vec![start]);
        while let Some(v) = stack.pop() {
            for &from in reversed.get(&v).into_iter().flatten() {
                if assigned.insert(from) {
                    component.push(from);
                    stack.push(from);
                }
            }
        }
        if component.len() > 1 {
            cyclic.extend(component);
        }
    }
    cyclic
}

/// The vertices that reach one of `targets` (the targets included).
pub(crate) fn reaching<E>(graph: &Graph<E>, targets: &BTreeSet<i64>) -> BTreeSet<i64> {
    let reversed = reversed(graph);
    let mut found = targets.clone();
    let mut stack: Vec<i64> = targets.iter().copied().collect();
    while let Some(v) = stack.pop() {
        for &from in reversed.get(&v).into_iter().flatten() {
            if found.insert(from) {
                stack.push(from);
            }
        }
    }
    found
}

/// Every elementary cycle, each once: found from its lowest vertex, through higher ones only,
/// as its vertices in order, each with the edge to the next (the last's to the first). At most
/// `max` of them, within a bounded search; `true` when some were left out.
pub(crate) fn elementary<E: Clone>(graph: &Graph<E>, max: usize) -> (Vec<Vec<(i64, E)>>, bool) {
    let mut found: Vec<Vec<(i64, E)>> = Vec::new();
    let mut steps = 0;
    let reversed = reversed(graph);
    for &start in &in_cycles(graph) {
        // Only through vertices above `start` that lead back to it (one search backwards):
        // a search from each start then walks its own component, not the whole graph.
        let mut back = BTreeSet::from([start]);
        let mut stack = vec![start];
        while let Some(v) = stack.pop() {
            for &from in reversed.get(&v).into_iter().flatten() {
                if from > start && back.insert(from) {
                    stack.push(from);
                }
            }
        }
        let successors = |v: i64| -> Vec<i64> {
            graph
                .get(&v)
                .map_or_else(Vec::new, |t| t.keys().rev().copied().filter(|to| back.contains(to)).collect())
        };
        let mut path = vec![start];
        let mut stack = vec![successors(start)];
        while let Some(next) = stack.last_mut() {
            steps += 1;
            if steps > CYCLE_STEPS || found.len() > max {
                found.truncate(max);
                return (found, true);
            }
            match next.pop() {
                Some(to) if to == start => {
                    let cycle = path
                        .iter()
                        .enumerate()
                        .map(|(k, &v)| (v, graph[&v][&path.get(k + 1).copied().unwrap_or(start)].clone()))
                        .collect();
                    found.push(cycle);
                }
                Some(to) if !path.contains(&to) => {
                    path.push(to);
                    stack.push(successors(to));
                }
                Some(_) => {}
                None => {
                    path.pop();
                    stack.pop();
                }
            }
        }
    }
    let truncated = found.len() > max;
    found.truncate(max);
    (found, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(i64, i64)]) -> Graph<()> {
        let mut graph: Graph<()> = BTreeMap::new();
        for &(from, to) in edges {
            graph.entry(from).or_default().insert(to, ());
        }
        graph
    }

    fn cycles(edges: &[(i64, i64)]) -> Vec<Vec<i64>> {
        let (found, truncated) = elementary(&graph(edges), 100);
        assert!(!truncated);
        found.into_iter().map(|c| c.into_iter().map(|(v, ())| v).collect()).collect()
    }

    #[test]
    fn a_cycle_of_two() {
        let edges = [(1, 2), (2, 1), (3, 1)];
        assert_eq!(cycles(&edges), [vec![1, 2]]);
        assert_eq!(in_cycles(&graph(&edges)), BTreeSet::from([1, 2]));
        // 3 waits for the cycle: it reaches it.
        assert_eq!(reaching(&graph(&edges), &BTreeSet::from([1, 2])), BTreeSet::from([1, 2, 3]));
    }

    #[test]
    fn a_cycle_of_three_and_one_of_two_sharing_a_vertex() {
        let edges = [(5, 7), (7, 9), (9, 5), (9, 11), (11, 9)];
        assert_eq!(cycles(&edges), [vec![5, 7, 9], vec![9, 11]]);
        assert_eq!(in_cycles(&graph(&edges)), BTreeSet::from([5, 7, 9, 11]));
    }

    #[test]
    fn a_long_chain_has_no_cycle() {
        let edges: Vec<(i64, i64)> = (1..5000).map(|v| (v + 1, v)).collect();
        assert!(cycles(&edges).is_empty());
        assert!(in_cycles(&graph(&edges)).is_empty());
        // A diamond is no cycle either.
        let diamond = [(1, 2), (1, 3), (2, 4), (3, 4)];
        assert!(cycles(&diamond).is_empty());
        assert!(in_cycles(&graph(&diamond)).is_empty());
    }

    #[test]
    fn a_long_cycle_is_found_once() {
        let mut edges: Vec<(i64, i64)> = (1..1000).map(|v| (v, v + 1)).collect();
        edges.push((1000, 1));
        let found = cycles(&edges);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0], (1..=1000).collect::<Vec<_>>());
    }

    #[test]
    fn too_many_cycles_are_cut_and_said_so() {
        // A complete graph on 8 vertices has thousands of elementary cycles.
        let edges: Vec<(i64, i64)> =
            (0..8).flat_map(|a| (0..8).filter(move |&b| b != a).map(move |b| (a, b))).collect();
        let (found, truncated) = elementary(&graph(&edges), 10);
        assert!(truncated);
        assert_eq!(found.len(), 10);
    }
}
