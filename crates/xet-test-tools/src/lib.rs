//! `#[needs(tool, …)]`: the one way a test of this workspace says it needs a tool on the machine
//! (git-lfs, FUSE, nginx, Garage, the reference client, …; the list is `tools::TOOLS`). Where a
//! tool is missing when the tests are built, the test is marked `#[ignore]` with the reason
//! (`cargo test` lists it as ignored and says what to install), and its body starts by failing
//! with that reason, so that `--include-ignored` (what CI runs) fails loudly instead of passing
//! without testing anything. Where every tool is here, the test is left as written.
//!
//! Written on `proc_macro` alone (no syn): the macro only reads a list of names and inserts an
//! attribute and a statement, which a parser crate would not make clearer.
//!
//! ```text
//! #[xet_test_tools::needs(git_lfs, fuse)]
//! #[test]
//! fn a_mount_shows_the_tree() { … }
//! ```
//!
//! `#[needs]` goes above `#[test]`: the test harness reads `#[ignore]` when `#[test]` expands,
//! so an `#[ignore]` added after that would be lost; the macro refuses to compile otherwise.

mod tools;

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

/// The tools the build script did not find (names of `tools::TOOLS`).
const MISSING: &str = env!("XET_TEST_TOOLS_MISSING");

/// Marks a test that needs the tools named (see the crate's documentation).
#[proc_macro_attribute]
pub fn needs(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr, item) {
        Ok(out) => out,
        Err((span, message)) => compile_error(span, &message),
    }
}

type Failure = (Span, String);

fn expand(attr: TokenStream, item: TokenStream) -> Result<TokenStream, Failure> {
    let wanted = tool_names(attr)?;
    let missing: Vec<&str> = wanted
        .iter()
        .filter_map(|name| {
            let (_, what) = tools::TOOLS.iter().find(|(n, _)| n == name)?;
            MISSING.split(',').any(|m| m == name).then_some(*what)
        })
        .collect();
    let items: Vec<TokenTree> = item.into_iter().collect();
    check_test_follows(&items)?;
    let ignored_already = has_attribute(&items, |inner| {
        inner == "ignore" || inner.starts_with("ignore =") || inner.starts_with("ignore=")
    });
    if missing.is_empty() {
        return Ok(items.into_iter().collect());
    }
    let reason = format!("needs {}", missing.join("; and "));
    let mut out: Vec<TokenTree> = Vec::new();
    // A test ignored for a reason of its own (a slow one, or one needing a store that is not
    // a tool) keeps that reason; run anyway, it fails with this one.
    if !ignored_already {
        out.extend(attribute(&format!("ignore = {}", quoted(&reason))));
    }
    out.extend(attribute("allow(unreachable_code)"));
    let body_at = items
        .iter()
        .rposition(|t| matches!(t, TokenTree::Group(g) if g.delimiter() == Delimiter::Brace))
        .ok_or_else(|| {
            (
                Span::call_site(),
                "#[needs] goes on a test function".to_string(),
            )
        })?;
    for (i, token) in items.into_iter().enumerate() {
        match token {
            TokenTree::Group(body) if i == body_at => {
                let failing = format!(
                    "::core::panic!({}); ",
                    quoted(&format!(
                        "this test {reason}, which was not found when the tests were built \
                         (install it and build again)"
                    ))
                );
                let mut stream: TokenStream = parse(&failing)?;
                stream.extend(body.stream());
                let mut group = Group::new(Delimiter::Brace, stream);
                group.set_span(body.span());
                out.push(TokenTree::Group(group));
            }
            other => out.push(other),
        }
    }
    Ok(out.into_iter().collect())
}

/// The comma-separated tool names of `#[needs(…)]`, each one `tools::TOOLS` knows.
fn tool_names(attr: TokenStream) -> Result<Vec<String>, Failure> {
    let mut names = Vec::new();
    let mut expect_name = true;
    for token in attr {
        match (&token, expect_name) {
            (TokenTree::Ident(ident), true) => {
                let name = ident.to_string();
                if !tools::TOOLS.iter().any(|(n, _)| *n == name) {
                    let known: Vec<&str> = tools::TOOLS.iter().map(|(n, _)| *n).collect();
                    return Err((
                        ident.span(),
                        format!(
                            "#[needs] knows no tool `{name}`; it knows {}",
                            known.join(", ")
                        ),
                    ));
                }
                names.push(name);
                expect_name = false;
            }
            (TokenTree::Punct(p), false) if p.as_char() == ',' => expect_name = true,
            _ => {
                return Err((
                    token.span(),
                    "#[needs] takes tool names separated by commas: #[needs(git_lfs, fuse)]"
                        .to_string(),
                ))
            }
        }
    }
    if names.is_empty() {
        return Err((
            Span::call_site(),
            "#[needs] names at least one tool: #[needs(git_lfs)]".to_string(),
        ));
    }
    Ok(names)
}

/// Refuses an item without `#[test]` among the attributes after `#[needs]` (see the crate's
/// documentation for why it must come after).
fn check_test_follows(items: &[TokenTree]) -> Result<(), Failure> {
    if has_attribute(items, |inner| inner == "test") {
        Ok(())
    } else {
        Err((
            Span::call_site(),
            "#[needs] goes above #[test] (the harness reads #[ignore] when #[test] expands)"
                .to_string(),
        ))
    }
}

/// Whether one of the item's outer attributes, `#[…]`, has an inside that `is` accepts (as
/// its tokens print).
fn has_attribute(items: &[TokenTree], is: impl Fn(&str) -> bool) -> bool {
    items.windows(2).any(|pair| match pair {
        [TokenTree::Punct(hash), TokenTree::Group(g)]
            if hash.as_char() == '#' && g.delimiter() == Delimiter::Bracket =>
        {
            is(g.stream().to_string().trim())
        }
        _ => false,
    })
}

/// `#[text]` as tokens.
fn attribute(text: &str) -> Vec<TokenTree> {
    let inner: TokenStream = text.parse().unwrap_or_default();
    vec![
        TokenTree::Punct(Punct::new('#', Spacing::Alone)),
        TokenTree::Group(Group::new(Delimiter::Bracket, inner)),
    ]
}

fn quoted(text: &str) -> String {
    Literal::string(text).to_string()
}

fn parse(text: &str) -> Result<TokenStream, Failure> {
    text.parse()
        .map_err(|e| (Span::call_site(), format!("#[needs] built bad tokens: {e}")))
}

fn compile_error(span: Span, message: &str) -> TokenStream {
    let tokens: Vec<TokenTree> = vec![
        TokenTree::Punct(Punct::new(':', Spacing::Joint)),
        TokenTree::Punct(Punct::new(':', Spacing::Alone)),
        TokenTree::Ident(Ident::new("core", span)),
        TokenTree::Punct(Punct::new(':', Spacing::Joint)),
        TokenTree::Punct(Punct::new(':', Spacing::Alone)),
        TokenTree::Ident(Ident::new("compile_error", span)),
        TokenTree::Punct(Punct::new('!', Spacing::Alone)),
        TokenTree::Group(Group::new(
            Delimiter::Parenthesis,
            TokenTree::Literal(Literal::string(message)).into(),
        )),
        TokenTree::Punct(Punct::new(';', Spacing::Alone)),
    ];
    tokens
        .into_iter()
        .map(|mut t| {
            t.set_span(span);
            t
        })
        .collect()
}
