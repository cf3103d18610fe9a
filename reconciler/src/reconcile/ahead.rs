//! A new namespace's wall goes ahead of a full pass. kube runs one reconcile of a baseline at a
//! time, so a namespace created while a full pass of its baseline is under way (a first
//! install, a resync, a spec change: in a large cluster, seconds of writes) would wait for
//! the whole pass before its own scoped reconcile began, with its pods unwalled meanwhile (or,
//! with `podsWaitForWall`, waiting). Instead, between two namespaces of the pass, the
//! namespaces marked for this baseline since the pass began that the pass did not see as
//! matching (new ones, or newly labelled) are planned afresh from the caches and their writes
//! go out next; the pass then skips them. They stay marked, so the reconcile after the pass
//! still looks at them (and finds its writes pending: nothing is written twice).

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::Arc;

use kube::ResourceExt;
use namespace_baseline_core::plan::{Baseline, Decision, Planner, decide};
use namespace_baseline_core::spec::NamespaceBaseline;
use namespace_baseline_core::wall::Change;
use tracing::debug;

use crate::reconcile::context::Context;
use crate::reconcile::writes::still_needed;
use crate::view::namespace_cache::CachedNamespace;
use crate::view::scope::Scope;

/// The writes of a full pass (`pass`, namespace by namespace), with the namespaces that start
/// matching meanwhile put ahead of the rest.
pub(crate) struct AheadOfThePass<'a, I> {
    pass: I,
    ctx: &'a Context,
    baseline: &'a NamespaceBaseline,
    name: String,
    /// The pass's own planner: which namespaces it saw as matching.
    planner: &'a Planner<'a, Arc<CachedNamespace>>,
    /// Those names, read once something is marked during the pass.
    matched: Option<HashSet<&'a str>>,
    /// The marks counted when the marked namespaces were last read.
    seen: u64,
    /// The namespaces planned ahead: the pass skips them.
    handled: HashSet<String>,
    ahead: VecDeque<(String, Vec<Change>)>,
}

impl<'a, I> AheadOfThePass<'a, I> {
    pub(crate) fn new(
        ctx: &'a Context,
        baseline: &'a NamespaceBaseline,
        planner: &'a Planner<'a, Arc<CachedNamespace>>,
        pass: I,
    ) -> Self {
        Self {
            pass,
            ctx,
            baseline,
            name: baseline.name_any(),
            planner,
            matched: None,
            // Whatever is marked when the pass begins is looked at once: a namespace marked
            // after the pass read the caches is not in its view.
            seen: 0,
            handled: HashSet::new(),
            ahead: VecDeque::new(),
        }
    }

    /// Plans the namespaces marked since the last look that the pass did not see matching and
    /// that were not planned ahead already.
    fn look(&mut self) {
        let Some(marked) = self
            .ctx
            .caches
            .dirty
            .marked_since(&self.name, &mut self.seen)
        else {
            return;
        };
        if marked.is_empty() {
            return;
        }
        let planner = self.planner;
        let matched = self
            .matched
            .get_or_insert_with(|| planner.matched_names().collect());
        let new: BTreeSet<String> = marked
            .into_iter()
            .filter(|namespace| {
                !matched.contains(namespace.as_str()) && !self.handled.contains(namespace)
            })
            .collect();
        if new.is_empty() {
            return;
        }
        debug!(baseline = %self.name, namespaces = ?new, "planned ahead of the full pass");
        // As a reconcile does: what this term is writing is read before the caches.
        let pending = self.ctx.caches.unseen.snapshot();
        let (namespaces, policies) = self.ctx.caches.scoped(&Scope::Namespaces(new.clone()));
        if let Decision::Converge(planner) =
            decide(Baseline::from(self.baseline), &namespaces, &policies)
        {
            for namespace in planner.namespaces() {
                let name = namespace.namespace.to_owned();
                let changes = still_needed(self.ctx, &pending, &name, namespace.changes);
                self.ahead.push_back((name, changes));
            }
        }
        // Planned, or gone from the caches since it was marked: either way not the pass's.
        self.handled.extend(new);
    }
}

impl<I: Iterator<Item = (String, Vec<Change>)>> Iterator for AheadOfThePass<'_, I> {
    type Item = (String, Vec<Change>);

    fn next(&mut self) -> Option<Self::Item> {
        self.look();
        if let Some(ahead) = self.ahead.pop_front() {
            return Some(ahead);
        }
        self.pass
            .by_ref()
            .find(|(namespace, _)| !self.handled.contains(namespace))
    }
}
