//! Generated text in a hand-written file: what lies between the markers
//! `<!-- NAME:start -->` and `<!-- NAME:end -->` (docs' measured tables,
//! README's board table), read and rewritten by the commands that measure it.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// Where section `name`'s content lies in `text` (between its markers).
fn span(text: &str, name: &str) -> Result<std::ops::Range<usize>> {
    let (start, end) = (
        format!("<!-- {name}:start -->"),
        format!("<!-- {name}:end -->"),
    );
    match (text.find(&start), text.find(&end)) {
        (Some(a), Some(z)) if a < z => Ok(a + start.len()..z),
        _ => bail!("no {start} ... {end} markers"),
    }
}

/// The content of section `name` of `text`.
pub fn get<'t>(text: &'t str, name: &str) -> Result<&'t str> {
    Ok(&text[span(text, name)?])
}

/// `text` with section `name`'s content replaced by a newline and `content`.
pub fn replace(text: &str, name: &str, content: &str) -> Result<String> {
    let at = span(text, name)?;
    Ok(format!(
        "{}\n{content}{}",
        &text[..at.start],
        &text[at.end..]
    ))
}

/// Rewrites section `name` of the file at `path` (see [`replace`]).
pub fn write(path: &Path, name: &str, content: &str) -> Result<()> {
    let what = || path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(what)?;
    std::fs::write(path, replace(&text, name, content).with_context(what)?).with_context(what)
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_only_the_section() {
        let doc = "a\n<!-- t:start -->\nold\n<!-- t:end -->\nz\n";
        let new = super::replace(doc, "t", "new\n").unwrap();
        assert_eq!(new, "a\n<!-- t:start -->\nnew\n<!-- t:end -->\nz\n");
        for bad in ["no markers", "<!-- t:end --> <!-- t:start -->"] {
            let e = super::replace(bad, "t", "x").unwrap_err().to_string();
            assert_eq!(e, "no <!-- t:start --> ... <!-- t:end --> markers");
        }
    }
}
