//! The import-graph check of the workspace's crates (the reconciler, core, the playground): a
//! crate's modules sit in named layers, a file imports from its own layer and from those
//! below, never from above, and no files import each other in a circle. `cargo` sees neither
//! (modules of one crate may import each other freely); a reader does.
//!
//! Each crate declares its layers, top to bottom, in its own `tests/layers.rs` and calls
//! [`assert_layered`], which reads every file of its `src/`, builds the graph of what imports
//! what (`crate::…` and `super::…` paths, and a `mod.rs`'s paths into its own children), fails
//! naming the edge when a rule is broken, and prints the graph (the layers, each file's size
//! in lines, the arrows): `make layers`. A file's layer is the first segment of its module
//! path (`view/caches.rs` is in `view`, `report.rs` in `report`). Test code (`#[cfg(test)]`
//! modules and files, and the files below them) may import anything and is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One layer: its name (a top-level module of the crate) and what it holds.
pub type Layer = (&'static str, &'static str);

/// Fails naming every breach when the crate whose sources are in `src` is not layered as
/// `layers` (top to bottom) says, after printing its graph; `title` names the crate in the
/// printout (`core/src`).
pub fn assert_layered(src: &Path, title: &str, layers: &[Layer]) {
    let files = load(src);
    assert!(
        files.len() >= layers.len(),
        "found only {} files in {}",
        files.len(),
        src.display()
    );
    println!("{}", render(title, &files, layers));
    let problems = check(&files, layers);
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// One source file: its module path (`view::caches`), size and whether it is test code.
#[derive(Debug, Clone)]
struct SourceFile {
    module: String,
    path: String,
    lines: usize,
    test_only: bool,
    text: String,
}

impl SourceFile {
    fn new(module: &str, text: &str) -> Self {
        Self {
            module: module.to_owned(),
            path: format!("{}.rs", module.replace("::", "/")),
            lines: text.lines().count(),
            test_only: false,
            text: text.to_owned(),
        }
    }

    fn layer(&self) -> &str {
        self.module.split("::").next().unwrap_or_default()
    }
}

/// The import graph between files (test code left out), and the paths it could not place.
#[derive(Debug, Default)]
struct Graph {
    /// From module to the modules it imports from, with the paths that make each arrow.
    edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    unresolved: Vec<String>,
}

// --- Reading the sources ---

/// Every `.rs` file under `src/` except the crate root and the binaries (`main.rs`, `bin/`),
/// which sit above every layer.
fn load(src: &Path) -> Vec<SourceFile> {
    let mut paths = Vec::new();
    collect(src, &mut paths);
    let mut files: Vec<SourceFile> = paths
        .iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(src).ok()?.to_str()?.replace('\\', "/");
            if relative == "lib.rs" || relative == "main.rs" || relative.starts_with("bin/") {
                return None;
            }
            let text = std::fs::read_to_string(path).ok()?;
            let mut file = SourceFile::new(&module_of(&relative), &text);
            file.path = relative;
            Some(file)
        })
        .collect();
    // A test module's own children (`admission/tests/pods.rs` below `admission/tests.rs`) are
    // test code too.
    let test_files = test_only_files(src, &paths);
    let test_modules: Vec<String> = files
        .iter()
        .filter(|file| test_files.contains(&file.path))
        .map(|file| file.module.clone())
        .collect();
    for file in &mut files {
        file.test_only = test_modules.iter().any(|module| {
            file.module == *module || file.module.starts_with(&format!("{module}::"))
        });
    }
    files.sort_by(|a, b| a.module.cmp(&b.module));
    files
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// `view/caches.rs` is `view::caches`, `commands/cluster_plan/mod.rs` is
/// `commands::cluster_plan`.
fn module_of(relative: &str) -> String {
    let stem = relative.trim_end_matches(".rs");
    let stem = stem.strip_suffix("/mod").unwrap_or(stem);
    stem.replace('/', "::")
}

/// The files declared under `#[cfg(test)]` (`#[cfg(test)] mod fixtures;`, or with a
/// `#[path]`), relative to `src`.
fn test_only_files(src: &Path, paths: &[PathBuf]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for path in paths {
        let text = std::fs::read_to_string(path).unwrap();
        let dir = path.parent().unwrap();
        let name = path.file_stem().unwrap().to_str().unwrap();
        // Children of `lib.rs`, `main.rs` and `mod.rs` are beside them; of `foo.rs`, in `foo/`.
        let children = if matches!(name, "lib" | "main" | "mod") {
            dir.to_path_buf()
        } else {
            dir.join(name)
        };
        let mut rest = text.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let mut item = rest.trim_start();
            let mut path_attribute = None;
            while let Some(attribute) = item.strip_prefix("#[") {
                let end = attribute.find(']').unwrap();
                let inner = &attribute[..end];
                if let Some(value) = inner.strip_prefix("path = \"") {
                    path_attribute = Some(value.trim_end_matches('"').to_owned());
                }
                item = attribute[end + 1..].trim_start();
            }
            let item = item.strip_prefix("pub ").unwrap_or(item);
            let Some(declaration) = item.strip_prefix("mod ") else {
                continue;
            };
            let end = declaration
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(declaration.len());
            if !declaration[end..].trim_start().starts_with(';') {
                continue; // An inline module: its code is left out by `code_outside_tests`.
            }
            let module = &declaration[..end];
            let file = match &path_attribute {
                Some(path) => dir.join(path),
                None if children.join(format!("{module}.rs")).exists() => {
                    children.join(format!("{module}.rs"))
                }
                None => children.join(module).join("mod.rs"),
            };
            if let Ok(relative) = file.strip_prefix(src) {
                found.insert(relative.to_str().unwrap().replace('\\', "/"));
            }
        }
    }
    found
}

/// The code of a file without comments, string literals' contents and `#[cfg(test)]` inline
/// modules.
fn code_outside_tests(text: &str) -> String {
    let code = without_comments_and_strings(text);
    let mut out = String::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item the attribute is on ends at its first `;` (a declaration) or with the
        // braces it opens (an inline module, a function).
        let open = after.find('{');
        let semicolon = after.find(';');
        let end = match (open, semicolon) {
            (Some(open), Some(semicolon)) if semicolon < open => semicolon + 1,
            (Some(open), _) => open + matching_brace(&after[open..]),
            (None, Some(semicolon)) => semicolon + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The length of the block `text` starts with, up to its matching `}`.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0_usize;
    for (index, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return index + 1;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces in a #[cfg(test)] item");
}

/// Blanks out comments (doc comments' `crate::` links are not imports) and the contents of
/// string and character literals (their braces would unbalance the blocks).
fn without_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && !ident_before(&chars, i) {
            // A raw string: r"…", r#"…"#, …
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            i += 2 + hashes;
            let closing: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&closing.chars().collect::<Vec<_>>()) {
                i += 1;
            }
            i += closing.len();
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // 'x' (a lifetime has no closing quote two characters on).
            i += 3;
            out.push_str("' '");
        } else if c == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{…}': the escaped character, then up to the closing quote.
            i += 3;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

// --- Paths ---

/// Every path a piece of code names from `start` (`crate::`, `super::`, or a child module's
/// name), a `use` group expanded: `crate::{a::b, c::{d, e}}` names `a::b`, `c::d` and `c::e`.
fn paths_after(code: &str, start: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find(start) {
        let at = from + found;
        from = at + start.len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        expand("", &code[from..], &mut paths);
    }
    paths
}

/// Reads one path (or `use` group) at the start of `text`, prefixed with `prefix`; returns
/// how much of `text` it read.
fn expand(prefix: &str, text: &str, out: &mut Vec<String>) -> usize {
    let mut path = prefix.to_owned();
    let mut i = 0;
    loop {
        if text[i..].starts_with('{') {
            i += 1;
            loop {
                i += text[i..]
                    .find(|c: char| !(c.is_whitespace() || c == ','))
                    .unwrap_or(text.len() - i);
                if i >= text.len() || text[i..].starts_with('}') {
                    return i + 1;
                }
                i += expand(&path, &text[i..], out);
            }
        }
        let length = text[i..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(text.len() - i);
        if length > 0 {
            if !path.is_empty() {
                path.push_str("::");
            }
            path.push_str(&text[i..i + length]);
            i += length;
        }
        if text[i..].starts_with("::") {
            i += 2;
            continue;
        }
        if !path.is_empty() {
            out.push(path);
        }
        // A rename (`path as name`) belongs to the path.
        let rest = text[i..].trim_start();
        if let Some(renamed) = rest.strip_prefix("as ") {
            let renamed = renamed.trim_start();
            let name = renamed
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(renamed.len());
            return text.len() - renamed.len() + name;
        }
        return i;
    }
}

/// The longest prefix of `path` that is a module of `modules`.
fn module_named<'m>(path: &str, modules: &'m BTreeSet<String>) -> Option<&'m String> {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=segments.len())
        .rev()
        .find_map(|n| modules.get(&segments[..n].join("::")))
}

fn parent(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(parent, _)| parent)
}

/// The names of `module`'s child modules (a folder's `mod.rs` has some).
fn children_of<'m>(module: &str, modules: &'m BTreeSet<String>) -> Vec<&'m str> {
    modules
        .iter()
        .filter(|other| parent(other) == module && !module.is_empty())
        .map(|other| other.rsplit("::").next().unwrap())
        .collect()
}

fn graph(files: &[SourceFile]) -> Graph {
    let modules: BTreeSet<String> = files.iter().map(|file| file.module.clone()).collect();
    let mut graph = Graph::default();
    for file in files.iter().filter(|file| !file.test_only) {
        let code = code_outside_tests(&file.text);
        let mut named: Vec<String> = paths_after(&code, "crate::");
        // `super::` is the parent module (of `a::b`, whether `a/b.rs` or `a/b/mod.rs`: `a`).
        for path in paths_after(&code, "super::") {
            let mut base = parent(&file.module);
            let mut path = path.as_str();
            while let Some(rest) = path.strip_prefix("super::") {
                base = parent(base);
                path = rest;
            }
            named.push(if base.is_empty() {
                path.to_owned()
            } else {
                format!("{base}::{path}")
            });
        }
        // A folder's `mod.rs` names its children without `crate::` (`pub use input::Input`).
        for child in children_of(&file.module, &modules) {
            for path in paths_after(&code, &format!("{child}::")) {
                named.push(format!("{}::{child}::{path}", file.module));
            }
        }
        for path in named {
            match module_named(&path, &modules) {
                Some(target) if *target != file.module => {
                    graph
                        .edges
                        .entry(file.module.clone())
                        .or_default()
                        .entry(target.clone())
                        .or_default()
                        .insert(path);
                }
                Some(_) => {}
                None => graph.unresolved.push(format!(
                    "{}: `crate::{path}` names no module of a layer (an item of lib.rs?): import it from the module that defines it",
                    file.path
                )),
            }
        }
    }
    graph
}

// --- The rules ---

fn rank(layers: &[Layer], layer: &str) -> Option<usize> {
    layers.iter().position(|(name, _)| *name == layer)
}

/// Every breach of the rules, each naming its file or edge; empty when the graph is clean.
fn check(files: &[SourceFile], layers: &[Layer]) -> Vec<String> {
    let graph = graph(files);
    let mut problems = graph.unresolved.clone();
    let layer_of: BTreeMap<&str, &str> = files
        .iter()
        .map(|file| (file.module.as_str(), file.layer()))
        .collect();
    for file in files.iter().filter(|file| !file.test_only) {
        if rank(layers, file.layer()).is_none() {
            problems.push(format!(
                "{}: in no layer (tests/layers.rs declares them: {})",
                file.path,
                layers
                    .iter()
                    .map(|(name, _)| *name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for (from, targets) in &graph.edges {
        for (to, paths) in targets {
            let (from_layer, to_layer) = (layer_of[from.as_str()], layer_of[to.as_str()]);
            if let (Some(a), Some(b)) = (rank(layers, from_layer), rank(layers, to_layer))
                && b < a
            {
                problems.push(format!(
                    "back-arrow {from} -> {to}: layer `{from_layer}` imports from `{to_layer}` above it ({})",
                    paths.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    for circle in circles(&graph) {
        let members: BTreeSet<&String> = circle.iter().collect();
        let edges: Vec<String> = circle
            .iter()
            .flat_map(|from| {
                graph.edges[from]
                    .iter()
                    .filter(|(to, _)| members.contains(to))
                    .map(move |(to, paths)| {
                        format!(
                            "{from} -> {to} ({})",
                            paths.iter().cloned().collect::<Vec<_>>().join(", ")
                        )
                    })
            })
            .collect();
        problems.push(format!(
            "import circle between {}: {}",
            circle.join(", "),
            edges.join("; ")
        ));
    }
    problems
}

/// The strongly connected components of more than one file (Tarjan's algorithm).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, node: &'g str) {
            let index = self.index.len();
            self.index.insert(node, index);
            self.low.insert(node, index);
            self.stack.push(node);
            self.on_stack.insert(node);
            let graph = self.graph;
            for next in graph.edges.get(node).into_iter().flat_map(BTreeMap::keys) {
                if !self.index.contains_key(next.as_str()) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next.as_str()]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next.as_str()) {
                    let low = self.low[node].min(self.index[next.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    component.push(member.to_owned());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.edges.keys() {
        if !tarjan.index.contains_key(node.as_str()) {
            tarjan.visit(node);
        }
    }
    tarjan.found
}

/// The graph for people: each layer with its files (lines) and their arrows, then the arrows
/// between layers.
fn render(title: &str, files: &[SourceFile], layers: &[Layer]) -> String {
    let graph = graph(files);
    let mut out = String::new();
    let total: usize = files.iter().map(|file| file.lines).sum();
    let _ = writeln!(
        out,
        "{title}: {} files, {total} lines (lib.rs, main.rs and bin/ sit above the layers)",
        files.len()
    );
    let mut layer_arrows: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (position, (layer, about)) in layers.iter().enumerate() {
        let members: Vec<&SourceFile> = files
            .iter()
            .filter(|file| file.layer() == *layer && !file.test_only)
            .collect();
        let lines: usize = members.iter().map(|file| file.lines).sum();
        let _ = writeln!(out, "\n{}. {layer}/ ({lines} lines): {about}", position + 1);
        for file in members {
            let targets: Vec<&str> = graph
                .edges
                .get(&file.module)
                .into_iter()
                .flat_map(BTreeMap::keys)
                .map(String::as_str)
                .collect();
            let _ = writeln!(
                out,
                "   {:<38} {:>5}  -> {}",
                file.path,
                file.lines,
                if targets.is_empty() {
                    "(nothing of the crate)".to_owned()
                } else {
                    targets.join(", ")
                }
            );
            for target in targets {
                let to = files.iter().find(|f| f.module == target).unwrap();
                if let Some(below) = rank(layers, to.layer()) {
                    *layer_arrows.entry((position, below)).or_default() += 1;
                }
            }
        }
    }
    let tests: Vec<&SourceFile> = files.iter().filter(|file| file.test_only).collect();
    let _ = writeln!(
        out,
        "\ntest-only files (may import anything; {} lines):",
        tests.iter().map(|file| file.lines).sum::<usize>()
    );
    for file in tests {
        let _ = writeln!(out, "   {:<38} {:>5}", file.path, file.lines);
    }
    let _ = writeln!(out, "\narrows between layers (file imports):");
    for ((from, to), count) in &layer_arrows {
        let direction = if from == to { "within" } else { "down" };
        let _ = writeln!(
            out,
            "   {:<10} -> {:<10} {count:>3}  ({direction})",
            layers[*from].0, layers[*to].0
        );
    }
    let circles = circles(&graph);
    let _ = writeln!(
        out,
        "\nimport circles: {}; back-arrows: {}",
        circles.len(),
        layer_arrows.keys().filter(|(from, to)| to < from).count()
    );
    out
}

// --- The checker on graphs made for it ---

#[cfg(test)]
mod tests {
    use super::*;

    /// The reconciler's layers, as its tests/layers.rs declares them.
    const LAYERS: &[Layer] = &[
        ("commands", ""),
        ("runtime", ""),
        ("reconcile", ""),
        ("view", ""),
        ("base", ""),
    ];

    fn check_reconciler(files: &[SourceFile]) -> Vec<String> {
        check(files, LAYERS)
    }

    fn files(sources: &[(&str, &str)]) -> Vec<SourceFile> {
        sources
            .iter()
            .map(|(module, text)| SourceFile::new(module, text))
            .collect()
    }

    #[test]
    fn a_circle_between_two_files_is_named_with_its_edges() {
        let problems = check_reconciler(&files(&[
            (
                "view::caches",
                "use crate::view::namespace_cache::NamespaceMeta;",
            ),
            ("view::namespace_cache", "use crate::view::caches::Caches;"),
            ("view::scope", "use crate::view::caches::Caches;"),
        ]));
        assert_eq!(
            problems,
            vec![
                "import circle between view::caches, view::namespace_cache: \
                 view::caches -> view::namespace_cache (view::namespace_cache::NamespaceMeta); \
                 view::namespace_cache -> view::caches (view::caches::Caches)"
            ]
        );
    }

    #[test]
    fn a_longer_circle_is_found_too() {
        let problems = check_reconciler(&files(&[
            ("reconcile::a", "fn f() { crate::reconcile::b::g() }"),
            ("reconcile::b", "use crate::reconcile::c::X;"),
            ("reconcile::c", "use crate::reconcile::a;"),
        ]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .starts_with("import circle between reconcile::a, reconcile::b, reconcile::c"),
            "{problems:?}"
        );
    }

    #[test]
    fn an_import_from_a_layer_above_is_a_back_arrow() {
        let problems = check_reconciler(&files(&[
            (
                "base::error",
                "pub enum Error { Plan(crate::commands::plan::PlanError) }",
            ),
            ("commands::plan", "use crate::base::error::Error;"),
        ]));
        assert_eq!(
            problems,
            vec![
                "back-arrow base::error -> commands::plan: layer `base` imports from `commands` above it (commands::plan::PlanError)",
                "import circle between base::error, commands::plan: \
                 base::error -> commands::plan (commands::plan::PlanError); \
                 commands::plan -> base::error (base::error::Error)",
            ]
        );
    }

    #[test]
    fn a_file_outside_the_layers_and_a_root_item_are_refused() {
        let problems = check_reconciler(&files(&[
            ("helpers", "use crate::base::error::Error;"),
            ("base::error", "use crate::Result;"),
        ]));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("`crate::Result` names no module"));
        assert!(problems[1].starts_with("helpers.rs: in no layer"));
    }

    #[test]
    fn use_groups_super_and_a_folders_own_children_are_read_and_test_code_is_not() {
        let sources = files(&[
            (
                "commands::plan",
                "//! Links in docs are no imports: [`crate::runtime::cli`].\n\
                 use crate::{base::{error::Error, retry}, view::caches as c};\n\
                 pub use report::Report;\n\
                 fn f() { let s = \"crate::runtime::run\"; let b = '{'; }\n\
                 #[cfg(test)]\nmod tests { use crate::runtime::run; fn g() { let _ = \"}\"; } }\n",
            ),
            ("commands::plan::report", "use super::super::crd::X;"),
            ("commands::crd", ""),
            ("base::error", ""),
            ("base::retry", ""),
            ("view::caches", ""),
            ("runtime::cli", ""),
            ("runtime::run", ""),
        ]);
        let graph = graph(&sources);
        let targets =
            |from: &str| -> Vec<&str> { graph.edges[from].keys().map(String::as_str).collect() };
        assert_eq!(
            targets("commands::plan"),
            vec![
                "base::error",
                "base::retry",
                "commands::plan::report",
                "view::caches"
            ]
        );
        assert_eq!(targets("commands::plan::report"), vec!["commands::crd"]);
        assert!(check_reconciler(&sources).is_empty());
    }

    #[test]
    fn a_test_modules_children_are_test_code() {
        let dir = std::env::temp_dir().join(format!("layers-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("view/tests")).unwrap();
        std::fs::write(
            dir.join("view/mod.rs"),
            "#[cfg(test)]\nmod tests;\npub mod caches;\n",
        )
        .unwrap();
        std::fs::write(dir.join("view/caches.rs"), "").unwrap();
        std::fs::write(dir.join("view/tests.rs"), "mod pods;\n").unwrap();
        std::fs::write(
            dir.join("view/tests/pods.rs"),
            "use crate::commands::plan;\n",
        )
        .unwrap();
        let files = load(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let test_only: Vec<&str> = files
            .iter()
            .filter(|f| f.test_only)
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(test_only, vec!["view/tests.rs", "view/tests/pods.rs"]);
        assert!(
            check_reconciler(&files).is_empty(),
            "{:?}",
            check_reconciler(&files)
        );
    }
}
