//! The documentation names only what exists: every repository path that README.md and
//! docs/*.md name (in backticks or as a link target) is in the repository, and every relative
//! markdown link between documentation files points to a file that exists and, with an
//! `#anchor`, to a heading that file has.
//!
//! A path is what looks like one: it starts with `src/`, `crates/`, `tests/`, `bench/`, `docs/`,
//! `fuzz/`, `.ci/` or `hooks/`, or is `install.sh`, `Cargo.toml` or `README.md`. A trailing
//! `#anchor`, `:line` or punctuation is not part of it, `src/foo.rs::item` names `src/foo.rs`,
//! and globs and placeholders (`*`, `{`, `<`) are not checked. Text in fenced code blocks is
//! not prose and is not read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::collections::HashMap;
use std::path::{Path, PathBuf};

const PREFIXES: &[&str] = &[
    "src/", "crates/", "tests/", "bench/", "docs/", "fuzz/", ".ci/", "hooks/",
];
const FILES: &[&str] = &["install.sh", "Cargo.toml", "README.md"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, relative to the crate root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    docs.sort();
    docs.insert(0, PathBuf::from("README.md"));
    docs
}

/// The paragraphs of a markdown text outside fenced code blocks, and its headings.
fn prose(text: &str) -> (Vec<String>, Vec<String>) {
    let mut paragraphs = Vec::new();
    let mut headings = Vec::new();
    let mut current = String::new();
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            paragraphs.push(std::mem::take(&mut current));
            continue;
        }
        if trimmed.is_empty() {
            paragraphs.push(std::mem::take(&mut current));
            continue;
        }
        if line.starts_with('#') {
            let title = line.trim_start_matches('#');
            if title.starts_with(' ') {
                headings.push(title.trim().to_string());
            }
        }
        current.push_str(line);
        current.push('\n');
    }
    paragraphs.push(current);
    paragraphs.retain(|p| !p.is_empty());
    (paragraphs, headings)
}

/// The inline code spans of a paragraph (single backticks; a backtick without its pair ends
/// nothing).
fn code_spans(paragraph: &str) -> Vec<String> {
    let pieces: Vec<&str> = paragraph.split('`').collect();
    let paired = if pieces.len() % 2 == 1 {
        pieces.len()
    } else {
        pieces.len() - 1
    };
    pieces[..paired]
        .iter()
        .skip(1)
        .step_by(2)
        .map(|s| s.to_string())
        .collect()
}

/// The link targets `[text](target)` of a paragraph, outside code spans.
fn link_targets(paragraph: &str) -> Vec<String> {
    let outside: String = paragraph
        .split('`')
        .step_by(2)
        .collect::<Vec<_>>()
        .join(" ");
    let mut targets = Vec::new();
    let mut rest = outside.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        if let Some(target) = rest[..end].split_whitespace().next() {
            targets.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        }
        rest = &rest[end..];
    }
    targets
}

/// The repository path a word names, if it names one.
fn as_path(word: &str) -> Option<String> {
    let mut p = word.trim_start_matches(['(', '[', '"', '\'']);
    if let Some(i) = p.find("::") {
        p = &p[..i];
    }
    if let Some(i) = p.find('#') {
        p = &p[..i];
    }
    if let Some(i) = p.find(':') {
        p = &p[..i];
    }
    let p = p.trim_end_matches(['.', ',', ';', ':', ')', ']', '!', '?', '"', '\'']);
    if p.contains(['*', '{', '<']) {
        return None;
    }
    let looks_like = PREFIXES
        .iter()
        .any(|pre| p.starts_with(pre) && p.len() > pre.len())
        || FILES.contains(&p);
    looks_like.then(|| p.to_string())
}

/// GitHub's anchor for a heading: lower case, letters, digits, `-` and `_` kept, spaces made
/// `-`, everything else dropped; a repeated heading gets `-1`, `-2`, ….
fn anchors(headings: &[String]) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    headings
        .iter()
        .map(|h| {
            let slug: String = h
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    '-' | '_' => Some(c),
                    c if c.is_alphanumeric() => Some(c),
                    _ => None,
                })
                .flat_map(char::to_lowercase)
                .collect();
            let n = seen.entry(slug.clone()).or_insert(0);
            let anchor = if *n == 0 {
                slug.clone()
            } else {
                format!("{slug}-{n}")
            };
            *n += 1;
            anchor
        })
        .collect()
}

/// Everything wrong with the documents `docs` (relative to `root`), one line each; `read`
/// gives a document's text.
fn problems(root: &Path, docs: &[PathBuf], read: &dyn Fn(&Path) -> Option<String>) -> Vec<String> {
    let mut found = Vec::new();
    let mut headings_of: HashMap<PathBuf, Vec<String>> = HashMap::new();
    let mut parsed = Vec::new();
    for doc in docs {
        let text = read(&root.join(doc)).unwrap_or_else(|| panic!("cannot read {}", doc.display()));
        let (paragraphs, headings) = prose(&text);
        headings_of.insert(doc.clone(), anchors(&headings));
        parsed.push((doc, paragraphs));
    }
    let anchors_of = |file: &Path, headings_of: &mut HashMap<PathBuf, Vec<String>>| {
        let rel = file.strip_prefix(root).unwrap_or(file).to_path_buf();
        headings_of
            .entry(rel)
            .or_insert_with(|| {
                read(file)
                    .map(|t| anchors(&prose(&t).1))
                    .unwrap_or_default()
            })
            .clone()
    };
    for (doc, paragraphs) in parsed {
        let name = doc.display();
        for paragraph in &paragraphs {
            for span in code_spans(paragraph) {
                for word in span.split_whitespace() {
                    if let Some(path) = as_path(word) {
                        if !root.join(&path).exists() {
                            found.push(format!("{name}: `{path}` does not exist"));
                        }
                    }
                }
            }
            for target in link_targets(paragraph) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let headings = if file.is_empty() {
                    headings_of[doc].clone()
                } else {
                    let resolved = root.join(doc).parent().unwrap().join(file);
                    if !resolved.exists() {
                        found.push(format!("{name}: link ({target}) points to a missing file"));
                        continue;
                    }
                    if resolved.extension().is_some_and(|e| e == "md") {
                        anchors_of(&resolved, &mut headings_of)
                    } else {
                        Vec::new()
                    }
                };
                if let Some(anchor) = anchor {
                    let checked = file.is_empty() || file.ends_with(".md");
                    if checked && !headings.iter().any(|a| a == anchor) {
                        found.push(format!("{name}: link ({target}) names no heading there"));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn every_path_and_link_in_the_docs_exists() {
    let root = root();
    let docs = documents(&root);
    assert!(docs.len() > 1, "no docs/*.md found");
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let found = problems(&root, &docs, &read);
    assert!(
        found.is_empty(),
        "the documentation names what does not exist:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_finds_paths_and_links_that_do_not_exist() {
    let root = root();
    let doc = PathBuf::from("docs/sample.md");
    let text = "# Sample\n\n## Two words\n\nSee `src/lib.rs`, `src/nowhere.rs:12`, \
                `crates/xet-format/src/hash.rs::ChunkHash`, `bench/nothing.sh [N]` and\n\
                `src/*.rs`, `DIR/xorbs/<hash>`; `cargo test` is no path.\n\n\
                [ok](format.md#1-hashing) [gone](missing.md) [here](#two-words) [not](#three)\n\
                [up](../README.md) [web](https://example.org/x.md)\n\n\
                ```sh\ncat src/in_a_fence.rs\n```\n";
    let read = |p: &Path| {
        if p.ends_with("docs/sample.md") {
            Some(text.to_string())
        } else {
            std::fs::read_to_string(p).ok()
        }
    };
    let found = problems(&root, &[doc], &read);
    let expected = [
        "docs/sample.md: `src/nowhere.rs` does not exist",
        "docs/sample.md: `bench/nothing.sh` does not exist",
        "docs/sample.md: link (missing.md) points to a missing file",
        "docs/sample.md: link (#three) names no heading there",
    ];
    assert_eq!(found, expected, "{found:#?}");
}
