//! Rules of the codebase that a reviewer would otherwise have to remember:
//!
//! - **Layers point one way.** The workspace's crates depend on each other only downwards:
//!   `xet-format` on none of them, `xet-protocol` on `xet-format`, `xet-client` and `xet-store`
//!   (side by side: neither on the other) on those two, and the `git-xet` crate on any (as `cargo metadata` says, normal and build dependencies; a
//!   crate's tests may use anything).
//! - **No circle of imports inside the storage engine.** The modules of `xet-store` name each
//!   other (`crate::module`) without a circle: a part's state lives in a module of its own
//!   below the `Store` that holds it.
//! - **A test never passes without running its checks.** No `#[test]` function (in `tests/`,
//!   `src/` or a crate) has a `return` of its own (a test that needs a tool says so with `#[needs(tool)]`,
//!   crates/xet-test-tools: ignored with the reason where the tool is missing, and failing
//!   loudly when run without it; see docs/development.md). Returns inside closures and
//!   nested functions are theirs, not the test's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's crates and their layers, lowest first: a crate may depend only on crates of
/// a lower layer.
const LAYERS: &[(&str, u8)] = &[
    ("xet-format", 0),
    ("xet-protocol", 1),
    ("xet-client", 2),
    ("xet-store", 2),
    ("git-xet", 3),
    // The tests' `#[needs(tool)]` (a proc macro): below everything, and only ever a
    // dev-dependency (checked below).
    ("xet-test-tools", 0),
];

fn layer(name: &str) -> Option<u8> {
    LAYERS.iter().find(|(n, _)| *n == name).map(|&(_, l)| l)
}

#[test]
fn workspace_crates_depend_only_on_lower_layers() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for package in meta["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap().to_string();
        let deps = edges.entry(name.clone()).or_default();
        for dep in package["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            // Dev-dependencies are the crate's tests', which may reach anything.
            if dep["kind"].as_str() == Some("dev") || dep_name == name {
                continue;
            }
            if layer(dep_name).is_some() {
                deps.insert(dep_name.to_string());
            }
        }
    }
    let product_uses_test_tools: Vec<&String> = edges
        .iter()
        .filter(|(_, deps)| deps.contains("xet-test-tools"))
        .map(|(name, _)| name)
        .collect();
    assert!(
        product_uses_test_tools.is_empty(),
        "only tests may depend on xet-test-tools: {product_uses_test_tools:?}"
    );
    for (name, _) in LAYERS {
        assert!(
            edges.contains_key(*name),
            "{name} is not in the workspace: {edges:?}"
        );
    }
    let mut wrong = Vec::new();
    for (crate_name, deps) in &edges {
        let Some(level) = layer(crate_name) else {
            panic!("{crate_name} is a workspace crate this test does not place in a layer");
        };
        for dep in deps {
            let dep_level = layer(dep).unwrap();
            if dep_level >= level {
                wrong.push(format!("{crate_name} depends on {dep}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies pointing up or sideways: {wrong:?}"
    );
    // The layers as they are: each above the format crate builds on it.
    assert!(edges["xet-protocol"].contains("xet-format"));
    for name in ["xet-client", "xet-store"] {
        assert!(edges[name].contains("xet-format"), "{name}: {edges:?}");
        assert!(edges[name].contains("xet-protocol"), "{name}: {edges:?}");
    }
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `#[test]` functions of `text` that `return` themselves: (name, line of the return).
/// A test's body is the braces after its `fn` line; a `return` counts unless a nested `fn`,
/// a closure (`|…|` before a `{` on the same line) or an `async` block opened the braces it
/// is in.
fn early_returns(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[test]" {
            i += 1;
            continue;
        }
        // The fn line (attributes and comments may come between).
        let Some(fn_at) = (i..lines.len()).find(|&j| lines[j].trim_start().starts_with("fn "))
        else {
            break;
        };
        let name = lines[fn_at]
            .trim_start()
            .trim_start_matches("fn ")
            .split(['(', '<'])
            .next()
            .unwrap_or("")
            .to_string();
        // Braces: a stack of "is this the test's own block".
        let mut stack: Vec<bool> = Vec::new();
        let mut j = fn_at;
        let mut started = false;
        while j < lines.len() {
            let line = lines[j];
            let code = line.split("//").next().unwrap_or("");
            let trimmed = code.trim();
            let nested = j != fn_at
                && (trimmed.starts_with("fn ")
                    || trimmed.contains("move |")
                    || trimmed.contains("| {")
                    || trimmed.contains("|| {")
                    || trimmed.contains("async move {")
                    || trimmed.contains("async {"));
            let own = stack.iter().all(|&o| o);
            if started && own && (trimmed.starts_with("return") || trimmed.contains(" return;")) {
                found.push((name.clone(), j + 1));
            }
            for c in code.chars() {
                match c {
                    '{' => {
                        stack.push(!nested || !started);
                        started = true;
                    }
                    '}' => {
                        stack.pop();
                    }
                    _ => {}
                }
            }
            if started && stack.is_empty() {
                break;
            }
            j += 1;
        }
        i = j + 1;
    }
    found
}

#[test]
fn no_test_returns_before_its_checks() {
    let mut files = Vec::new();
    rust_files(&root().join("tests"), &mut files);
    rust_files(&root().join("src"), &mut files);
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        rust_files(&entry.unwrap().path(), &mut files);
    }
    assert!(files.len() > 100, "{files:?}");
    let mut tests = 0;
    let mut offenders = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        tests += text.lines().filter(|l| l.trim() == "#[test]").count();
        for (name, line) in early_returns(&text) {
            offenders.push(format!(
                "{}:{line} ({name})",
                file.strip_prefix(root()).unwrap().display()
            ));
        }
    }
    assert!(tests > 600, "only {tests} tests found");
    assert!(
        offenders.is_empty(),
        "tests that return before their checks: {offenders:?}"
    );
}

#[test]
fn the_early_return_rule_finds_what_it_should() {
    // The examples spell the keyword RETURN so that this file passes its own rule.
    let bad = "#[test]\nfn skips() {\n    if std::env::var(\"CI\").is_err() {\n        RETURN;\n    }\n    assert!(true);\n}\n".replace("RETURN", "return");
    assert_eq!(early_returns(&bad), vec![("skips".to_string(), 4)]);
    let also_bad =
        "#[test]\n#[ignore = \"x\"]\nfn quits() -> Result<(), String> {\n    RETURN Ok(());\n}\n"
            .replace("RETURN", "return");
    assert_eq!(early_returns(&also_bad), vec![("quits".to_string(), 4)]);
    let fine = "#[test]\nfn waits() {\n    let f = |x: u32| {\n        if x > 1 {\n            RETURN 2;\n        }\n        x\n    };\n    fn helper() -> u32 {\n        RETURN 1;\n    }\n    assert_eq!(f(helper()), 1);\n}\n".replace("RETURN", "return");
    assert!(
        early_returns(&fine).is_empty(),
        "{:?}",
        early_returns(&fine)
    );
    let after = "fn not_a_test() {\n    RETURN;\n}\n#[test]\nfn ok() {\n    assert!(true);\n}\n"
        .replace("RETURN", "return");
    assert!(early_returns(&after).is_empty());
}

/// The modules of a crate's `src/` (top-level files, `lib.rs` aside) and the other modules each
/// names as `crate::module`, comments left out.
fn module_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut texts = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap().flatten() {
        let path = entry.path();
        let Some(name) = path.file_stem().and_then(|n| n.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && name != "lib" {
            let text: String = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            texts.insert(name.to_string(), text);
        }
    }
    let names: BTreeSet<String> = texts.keys().cloned().collect();
    texts
        .iter()
        .map(|(name, text)| {
            let named = text
                .split("crate::")
                .skip(1)
                .map(|rest| {
                    rest.chars()
                        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                        .collect::<String>()
                })
                .filter(|m| m != name && names.contains(m))
                .collect();
            (name.clone(), named)
        })
        .collect()
}

/// A circle in `graph` (its modules in order, the first repeated at the end), if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_storage_engine_has_no_circle_of_imports() {
    let graph = module_imports(&root().join("crates/xet-store/src"));
    assert!(graph.len() > 10, "{graph:?}");
    assert!(
        graph["cas"].contains("backend") && graph["gc"].contains("cas"),
        "the imports are read: {graph:?}"
    );
    if let Some(found) = circle(&graph) {
        panic!(
            "modules of xet-store import each other in a circle: {}",
            found.join(" -> ")
        );
    }
}

#[test]
fn the_circle_finder_finds_a_circle_and_only_one() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(circle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    assert_eq!(
        circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
