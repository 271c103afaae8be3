//! Which entries of a tree `git checkout` writes: the one rule deciding what `git xet mount`
//! shows and what `git xet cat` and every lookup of the mount can reach.
//!
//! git refuses to check out a path when one of its names is (or, for a symbolic link, lies
//! under) one of these; this module refuses the same names, and a few no sound tree holds:
//!
//! - `.` and `..`;
//! - `.git` in any letter case: the repository's own directory, whose configuration and hooks
//!   (`core.fsmonitor`, `core.pager`, …) run commands in any git started in the directory, so a
//!   commit that brought one would run its author's commands;
//! - the names NTFS reads as `.git`: trailing spaces and dots (`.git `, `.git.`), an alternate
//!   data stream (`.git:x`, `.git::$INDEX_ALLOCATION`), the short name `git~1`; and the same
//!   right after a backslash inside a name (`a\.git`), which Windows reads as a separator.
//!   git checks these on every platform (`core.protectNTFS` is on by default); other names with
//!   a backslash are ordinary names on Linux, and written as they are;
//! - the names HFS+ reads as `.git`: `.git` with any of the 16 code points HFS+ ignores
//!   ([`HFS_IGNORED`], such as U+200C ZERO WIDTH NON-JOINER) anywhere in it. git checks these
//!   where `core.protectHFS` is on (by default on macOS); they are refused here everywhere;
//! - a symbolic link named `.gitmodules`, or a name NTFS or HFS+ reads as that (`.gitmodules `,
//!   the short names `gitmod~1` to `gitmod~4` and `gi7eba~N`), or a symbolic link under a
//!   directory named `.gitmodules`;
//! - an empty name (git cannot read a tree holding one), a name holding `/` (a damaged tree: git
//!   would read it as several names) or a NUL byte (no tree holds one; a path asked for might).
//!
//! Windows refuses more (every backslash, drive letters, reserved names); git checks those only
//! when it runs there, and the mount does not.

/// Why git does not check out a name ([`check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("an empty name")]
    Empty,
    #[error("`.` or `..` (the directory itself or its parent)")]
    Dot,
    #[error("a name holding `/` (a damaged tree: git would read it as several names)")]
    Slash,
    #[error("a name holding a NUL byte")]
    Nul,
    #[error(
        "`.git`, or a name NTFS or HFS+ reads as `.git`: the repository's own directory, whose \
         configuration and hooks run commands"
    )]
    DotGit,
    #[error(
        "a symbolic link named `.gitmodules` (or a name NTFS or HFS+ reads as that), or under it"
    )]
    GitmodulesLink,
}

/// The code points HFS+ ignores in names, so that `.g\u{200c}it` is `.git` there.
pub const HFS_IGNORED: [char; 16] = [
    '\u{200c}', '\u{200d}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
    '\u{202e}', '\u{206a}', '\u{206b}', '\u{206c}', '\u{206d}', '\u{206e}', '\u{206f}', '\u{feff}',
];

/// Whether git checks out an entry whose names from the root are `names` (its own name last),
/// a symbolic link if `link`. The root itself (no names) is always there.
pub fn check(names: &[&[u8]], link: bool) -> Result<(), Refusal> {
    let Some(last) = names.len().checked_sub(1) else {
        return Ok(());
    };
    for (i, name) in names.iter().enumerate() {
        check_name(name)?;
        // A link's `.gitmodules` rules hold for the names of its directories too (as git
        // checks them, a name followed by `/`), except the NTFS spellings, which must end the
        // path or be followed by `:`.
        if link && gitmodules(name, i == last) {
            return Err(Refusal::GitmodulesLink);
        }
    }
    Ok(())
}

/// [`check`] of a path asked for by a user: `/`-separated, from the root, empty names (`a//b`,
/// a leading or trailing `/`) ignored; never a symbolic link's own rules.
pub fn check_path(path: &str) -> Result<(), Refusal> {
    let names: Vec<&[u8]> = path
        .split('/')
        .filter(|n| !n.is_empty())
        .map(str::as_bytes)
        .collect();
    check(&names, false)
}

/// The rules of one name, whatever the entry is.
fn check_name(name: &[u8]) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err(Refusal::Empty);
    }
    if name.contains(&0) {
        return Err(Refusal::Nul);
    }
    if name.contains(&b'/') {
        return Err(Refusal::Slash);
    }
    if name == b"." || name == b".." {
        return Err(Refusal::Dot);
    }
    if hfs_dot(name, b"git") || after_backslashes(name).any(ntfs_dotgit) {
        return Err(Refusal::DotGit);
    }
    Ok(())
}

/// The start of `name`, and what follows each backslash in it: where NTFS starts a name.
fn after_backslashes(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::once(name).chain(
        name.iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'\\')
            .map(move |(i, _)| &name[i + 1..]),
    )
}

/// Whether NTFS reads `name` as `.git` (or its short name `git~1`): either, in any letter case,
/// followed only by spaces and dots up to the end, a backslash or a `:` (an alternate stream).
fn ntfs_dotgit(name: &[u8]) -> bool {
    let rest = if starts_with_ignore_case(name, b".git") {
        &name[4..]
    } else if starts_with_ignore_case(name, b"git~1") {
        &name[5..]
    } else {
        return false;
    };
    for &b in rest {
        match b {
            b'\\' | b':' => return true,
            b' ' | b'.' => {}
            _ => return false,
        }
    }
    true
}

/// The rules of a symbolic link's names: whether `name` is `.gitmodules` as git or a
/// filesystem reads it. `ends` says whether the name ends the path (else a `/` follows it).
fn gitmodules(name: &[u8], ends: bool) -> bool {
    name.eq_ignore_ascii_case(b".gitmodules")
        || hfs_dot(name, b"gitmodules")
        || after_backslashes(name).any(|n| ntfs_dot_name(n, b"gitmodules", b"gi7eba", ends))
}

/// Whether NTFS reads `name` as `.{long}` (ASCII, lower case): in any letter case, as its
/// regular short name (the first 6 letters, `~1` to `~4`), or as a fallback short name (up to
/// 6 letters of `short`, a `~` and digits, 8 bytes in all); followed by spaces and dots only,
/// then `:`, or the end of the path (`ends`; a `/` does not count).
fn ntfs_dot_name(name: &[u8], long: &[u8], short: &[u8], ends: bool) -> bool {
    let rest_ok = |from: usize| {
        for &b in name.get(from..).unwrap_or_default() {
            match b {
                b':' => return true,
                b' ' | b'.' => {}
                _ => return false,
            }
        }
        ends
    };
    if name.first() == Some(&b'.') && starts_with_ignore_case(&name[1..], long) {
        return rest_ok(1 + long.len());
    }
    if long.len() >= 6
        && starts_with_ignore_case(name, &long[..6])
        && name.get(6) == Some(&b'~')
        && name.get(7).is_some_and(|b| (b'1'..=b'4').contains(b))
    {
        return rest_ok(8);
    }
    // The fallback short name: the first 8 bytes.
    let mut i = 0;
    let mut saw_tilde = false;
    while i < 8 {
        let Some(&b) = name.get(i) else {
            return false;
        };
        if saw_tilde {
            if !b.is_ascii_digit() {
                return false;
            }
        } else if b == b'~' {
            i += 1;
            if !name.get(i).is_some_and(|d| (b'1'..=b'9').contains(d)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || !b.is_ascii() || Some(&b.to_ascii_lowercase()) != short.get(i) {
            return false;
        }
        i += 1;
    }
    rest_ok(8)
}

/// Whether HFS+ reads `name` as `.{needle}` (ASCII, lower case): its characters, with the
/// ignored ones ([`HFS_IGNORED`]) skipped, are `.` and the needle in any letter case. As in
/// git, the name is read as UTF-8 up to the first byte that is not (U+FFFE and U+FFFF count as
/// not UTF-8 there), and that byte ends it.
fn hfs_dot(name: &[u8], needle: &[u8]) -> bool {
    let text = match std::str::from_utf8(name) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&name[..e.valid_up_to()]).unwrap_or_default(),
    };
    let mut chars = text
        .chars()
        .take_while(|c| !matches!(c, '\u{fffe}' | '\u{ffff}'))
        .filter(|c| !HFS_IGNORED.contains(c));
    chars.next() == Some('.')
        && needle.iter().all(|&n| {
            chars
                .next()
                .is_some_and(|c| c.is_ascii() && c.to_ascii_lowercase() == char::from(n))
        })
        && chars.next().is_none()
}

fn starts_with_ignore_case(name: &[u8], prefix: &[u8]) -> bool {
    name.len() >= prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> Result<(), Refusal> {
        check(&[n.as_bytes()], false)
    }

    fn link(n: &str) -> Result<(), Refusal> {
        check(&[n.as_bytes()], true)
    }

    #[test]
    fn ordinary_names_pass() {
        for n in [
            "a.txt",
            ".gitignore",
            ".gitattributes",
            ".gitmodules",
            ".github",
            ".gitx",
            ".git-blame-ignore-revs",
            "git",
            "git~2",
            "git~10",
            "...",
            ".. ",
            "a\\b",
            "a\\..",
            "x.git",
            " .git",
            "gitmod~1",
            "\u{200b}.git",
            ".gi\u{2060}t",
            ".ğit",
        ] {
            assert_eq!(name(n), Ok(()), "{n:?}");
        }
        assert_eq!(check(&[], false), Ok(()), "the root");
        assert_eq!(check(&[b"a", b"b", b"c.bin"], false), Ok(()));
        assert_eq!(check(&[b"\xff\xfe"], false), Ok(()), "not UTF-8 is a name");
    }

    #[test]
    fn dot_dotdot_empty_slash_nul() {
        assert_eq!(name("."), Err(Refusal::Dot));
        assert_eq!(name(".."), Err(Refusal::Dot));
        assert_eq!(name(""), Err(Refusal::Empty));
        assert_eq!(name("a/b"), Err(Refusal::Slash));
        assert_eq!(name("../x"), Err(Refusal::Slash));
        assert_eq!(name("a\0b"), Err(Refusal::Nul));
        assert_eq!(check(&[b"ok", b".."], false), Err(Refusal::Dot));
        assert_eq!(check(&[b"..", b"ok"], false), Err(Refusal::Dot));
    }

    #[test]
    fn dotgit_in_every_case_and_every_place() {
        for n in [".git", ".GIT", ".Git", ".gIT"] {
            assert_eq!(name(n), Err(Refusal::DotGit), "{n:?}");
            assert_eq!(link(n), Err(Refusal::DotGit), "{n:?}");
        }
        assert_eq!(check(&[b"sub", b".git"], false), Err(Refusal::DotGit));
        assert_eq!(check(&[b".git", b"config"], false), Err(Refusal::DotGit));
        assert_eq!(check(&[b"a", b".GIT", b"b"], false), Err(Refusal::DotGit));
    }

    #[test]
    fn ntfs_spellings_of_dotgit() {
        for n in [
            ".git ",
            ".git.",
            ".git. . ",
            ".GIT  ..",
            ".git:",
            ".git:x",
            ".git::$INDEX_ALLOCATION",
            ".git . :stream",
            ".git\\",
            ".git\\config",
            ".git.\\x",
            "git~1",
            "GIT~1",
            "Git~1 .",
            "git~1:x",
            "git~1\\y",
            "a\\.git",
            "a\\b\\.GIT",
            "a\\git~1",
            "a\\.git \\c",
        ] {
            assert_eq!(name(n), Err(Refusal::DotGit), "{n:?}");
        }
        for n in [
            ".git x", ".gitx:", "git~1x", "git~", "git1", "a\\.gitx", "a.git",
        ] {
            assert_eq!(name(n), Ok(()), "{n:?}");
        }
    }

    #[test]
    fn hfs_spellings_of_dotgit() {
        for c in HFS_IGNORED {
            for n in [
                format!("{c}.git"),
                format!(".{c}git"),
                format!(".g{c}it"),
                format!(".gi{c}t"),
                format!(".git{c}"),
                format!(".{c}G{c}{c}I{c}T{c}"),
            ] {
                assert_eq!(name(&n), Err(Refusal::DotGit), "{n:?}");
            }
        }
        // As in git, a byte that is not UTF-8 after `.git` ends the name for HFS+ ...
        assert_eq!(check(&[b".git\xff"], false), Err(Refusal::DotGit));
        assert_eq!(check(&[b".git\xef\xbf\xbe"], false), Err(Refusal::DotGit));
        assert_eq!(check(&[b".git\xed\xa0\x80"], false), Err(Refusal::DotGit));
        // ... and before it, the name is not `.git`.
        assert_eq!(check(&[b".g\xffit"], false), Ok(()));
        assert_eq!(check(&[b"\xff.git"], false), Ok(()));
        // Another letter, a code point HFS+ keeps, letters outside ASCII.
        for n in [".\u{200c}gitx", ".g\u{200b}it", ".gıt", ".\u{200c}"] {
            assert_eq!(name(n), Ok(()), "{n:?}");
        }
    }

    #[test]
    fn gitmodules_only_as_a_link() {
        for n in [
            ".gitmodules",
            ".GITMODULES",
            ".gitmodules ",
            ".gitmodules.",
            ".gitmodules:x",
            ".gitmodules . :",
            "gitmod~1",
            "GITMOD~4 .",
            "gi7eba~1",
            "gi7eba~9",
            "gi7eb~12",
            "gi7e~123",
            "g~123456",
            "~1234567",
            ".g\u{200c}itmodules",
            "\u{feff}.gitmodules\u{200d}",
            "a\\.gitmodules",
            "a\\gitmod~2",
        ] {
            assert_eq!(link(n), Err(Refusal::GitmodulesLink), "{n:?}");
            assert_eq!(name(n), Ok(()), "{n:?} is a file git writes");
        }
        for n in [
            ".gitmodulesx",
            "gitmod~5",
            "gitmod~0",
            "gi7eba~0",
            "gi7ebc~1",
            "gi7eba~1x",
            "gi7ebaa~1",
            "g~1234567",
            "gi7eb~1a",
            ".gitmodule",
        ] {
            assert_eq!(link(n), Ok(()), "{n:?}");
        }
    }

    #[test]
    fn a_link_under_gitmodules() {
        // A directory named `.gitmodules` (as git or HFS+ reads it) holds no link ...
        for dir in [
            ".gitmodules",
            ".GitModules",
            ".git\u{200c}modules",
            ".gitmodules :",
        ] {
            let path: [&[u8]; 2] = [dir.as_bytes(), b"x"];
            assert_eq!(check(&path, true), Err(Refusal::GitmodulesLink), "{dir:?}");
            assert_eq!(check(&path, false), Ok(()), "{dir:?} holds files");
        }
        // ... but the NTFS spellings count only at the end of the path (or before a `:`).
        for dir in [".gitmodules ", "gitmod~1", "gi7eba~1"] {
            assert_eq!(check(&[dir.as_bytes(), b"x"], true), Ok(()), "{dir:?}");
        }
    }

    #[test]
    fn paths_asked_for() {
        assert_eq!(check_path(".git/config"), Err(Refusal::DotGit));
        assert_eq!(check_path("/sub//.GIT/"), Err(Refusal::DotGit));
        assert_eq!(check_path("a/../b"), Err(Refusal::Dot));
        assert_eq!(check_path("a/./b"), Err(Refusal::Dot));
        assert_eq!(check_path("a\0"), Err(Refusal::Nul));
        assert_eq!(check_path("docs/readme.txt"), Ok(()));
        assert_eq!(check_path(""), Ok(()));
        assert_eq!(check_path(".gitmodules"), Ok(()));
    }
}
