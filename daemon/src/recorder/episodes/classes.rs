//! The kind of queue a path episode waits in (issue 33): the bottleneck
//! classifier's class of its peers, asked once a read for the episodes
//! followed (a handful), never per socket.

use super::*;

impl Detector {
    /// Each path episode's class from `class_of(netns, peer, interface)`
    /// over the peers its moving sockets talked to at the last read: the
    /// class most of them have, `unknown` only when none has another; a
    /// read where no peer is classified (the classifier looks less often
    /// than the recorder reads) keeps the class it had.
    pub fn classify(&mut self, class_of: &dyn Fn(u32, IpAddr, &str) -> Option<BottleneckClass>) {
        for f in self.followed.values_mut() {
            let Some(p) = &f.path else { continue };
            if let Some(c) = most_common(
                f.peers
                    .iter()
                    .filter_map(|&peer| class_of(p.netns, peer, &p.interface)),
            ) {
                f.bottleneck = Some(c);
            }
        }
    }
}

/// The class most of `classes` have (ties: the first in
/// `BottleneckClass::ALL`), `unknown` only when no other is there.
fn most_common(classes: impl Iterator<Item = BottleneckClass>) -> Option<BottleneckClass> {
    let mut n = [0usize; BottleneckClass::ALL.len()];
    let mut any = false;
    for c in classes {
        any = true;
        if let Some(i) = BottleneckClass::ALL.iter().position(|&a| a == c) {
            n[i] += 1;
        }
    }
    if !any {
        return None;
    }
    let known = BottleneckClass::ALL
        .iter()
        .zip(n)
        .filter(|&(&c, k)| c != BottleneckClass::Unknown && k > 0)
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)));
    Some(known.map_or(BottleneckClass::Unknown, |(&c, _)| c))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{bulk, run, settings, T0};
    use super::*;

    #[test]
    fn a_path_episode_takes_its_peers_class() {
        use BottleneckClass::*;
        assert_eq!(
            most_common([Droptail, Aqm, Droptail].into_iter()),
            Some(Droptail)
        );
        assert_eq!(most_common([Unknown, Unknown, Aqm].into_iter()), Some(Aqm));
        assert_eq!(most_common([Unknown].into_iter()), Some(Unknown));
        assert_eq!(most_common(std::iter::empty()), None);
        // Ties: the first in ALL's order.
        assert_eq!(most_common([Aqm, Droptail].into_iter()), Some(Droptail));

        let mut d = Detector::new(settings(), 1);
        run(&mut d, &[Some(400); 4]);
        let peer = bulk(1, 400, 0).remote_addr;
        d.classify(&|_, p, _| (p == peer).then_some(Aqm));
        assert_eq!(d.open()[0].bottleneck, Some(Aqm));
        // A read the classifier has nothing for keeps the class.
        d.classify(&|_, _, _| None);
        assert_eq!(d.open()[0].bottleneck, Some(Aqm));
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
        assert!(!closed.is_empty() && closed.iter().all(|e| e.bottleneck == Some(Aqm)));
    }
}
