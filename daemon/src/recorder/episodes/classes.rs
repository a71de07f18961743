//! The kind of queue a path episode waits in, and whose traffic fills it
//! (issue 33): the bottleneck classifier's verdict on its peers, asked
//! once a read for the episodes followed (a handful), never per socket.

use super::*;

impl Detector {
    /// Each path episode's class and owner from `class_of(netns, peer,
    /// interface)` over the peers its moving sockets talked to at the last
    /// read: the one most of them have, `unknown` only when none has
    /// another; a read where no peer has one (the classifier looks less
    /// often than the recorder reads) keeps what it had.
    pub fn classify(
        &mut self,
        class_of: &dyn Fn(u32, IpAddr, &str) -> Option<super::super::Verdict>,
    ) {
        for f in self.followed.values_mut() {
            let Some(p) = &f.path else { continue };
            let verdicts: Vec<_> = f
                .peers
                .iter()
                .filter_map(|&peer| class_of(p.netns, peer, &p.interface))
                .collect();
            let class = most_common(
                &BottleneckClass::ALL,
                BottleneckClass::Unknown,
                verdicts.iter().map(|v| v.0),
            );
            let owner = most_common(
                &OwnerClass::ALL,
                OwnerClass::Unknown,
                verdicts.iter().filter_map(|v| v.1),
            );
            f.bottleneck = class.or(f.bottleneck);
            f.owner = owner.or(f.owner);
        }
    }
}

/// The value most of `values` have (ties: the first in `all`), `unknown`
/// only when no other is there; None when there is none.
fn most_common<C: Copy + PartialEq>(
    all: &[C],
    unknown: C,
    values: impl Iterator<Item = C>,
) -> Option<C> {
    let mut n = vec![0usize; all.len()];
    let mut any = false;
    for c in values {
        any = true;
        if let Some(i) = all.iter().position(|&a| a == c) {
            n[i] += 1;
        }
    }
    if !any {
        return None;
    }
    let mut best: Option<(C, usize)> = None;
    for (&c, k) in all.iter().zip(n) {
        if c != unknown && k > 0 && best.is_none_or(|(_, b)| k > b) {
            best = Some((c, k));
        }
    }
    Some(best.map_or(unknown, |(c, _)| c))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{bulk, run, settings, T0};
    use super::*;

    #[test]
    fn a_path_episode_takes_its_peers_class() {
        use BottleneckClass::*;
        let most =
            |v: &[BottleneckClass]| most_common(&BottleneckClass::ALL, Unknown, v.iter().copied());
        assert_eq!(most(&[Droptail, Aqm, Droptail]), Some(Droptail));
        assert_eq!(most(&[Unknown, Unknown, Aqm]), Some(Aqm));
        assert_eq!(most(&[Unknown]), Some(Unknown));
        assert_eq!(most(&[]), None);
        // Ties: the first in ALL's order.
        assert_eq!(most(&[Aqm, Droptail]), Some(Droptail));

        let mut d = Detector::new(settings(), 1);
        run(&mut d, &[Some(400); 4]);
        let peer = bulk(1, 400, 0).remote_addr;
        let other: IpAddr = "192.0.2.99".parse().unwrap();
        d.classify(&|_, p, _| (p == peer).then_some((Droptail, Some(OwnerClass::Neighbour))));
        assert_eq!(d.open()[0].bottleneck, Some(Droptail));
        assert_eq!(d.open()[0].owner, Some(OwnerClass::Neighbour));
        // A read the classifier has nothing for keeps both; a peer not of
        // the episode counts for nothing.
        d.classify(&|_, p, _| (p == other).then_some((Clear, Some(OwnerClass::Own))));
        assert_eq!(d.open()[0].bottleneck, Some(Droptail));
        assert_eq!(d.open()[0].owner, Some(OwnerClass::Neighbour));
        // Once no queue stands there is no owner to say: the last one stays.
        d.classify(&|_, p, _| (p == peer).then_some((Aqm, None)));
        assert_eq!(d.open()[0].bottleneck, Some(Aqm));
        assert_eq!(d.open()[0].owner, Some(OwnerClass::Neighbour));
        // And its summary in the journal says so.
        let w = d.observe(T0 + 4_000, &[bulk(1, 5, 5_000_000)], None, &|_, _| None);
        let w2: Vec<Write> = (5..9)
            .flat_map(|i| d.observe(T0 + i * 1000, &[], None, &|_, _| None))
            .collect();
        let closed: Vec<&Episode> = w
            .iter()
            .chain(&w2)
            .filter_map(|w| match w {
                Write::Episode(r) if !r.episode.open && r.episode.kind == EpisodeKind::Path => {
                    Some(&r.episode)
                }
                _ => None,
            })
            .collect();
        assert!(!closed.is_empty());
        assert!(closed
            .iter()
            .all(|e| e.bottleneck == Some(Aqm) && e.owner == Some(OwnerClass::Neighbour)));
    }
}
