//! Variables in config values: `${NAME}` and `${NAME:-default}` in any string value, so one
//! config serves every environment (`url = "${RAW_BUCKET}/orders"`). A value comes from the
//! variables given for the run (`--var NAME=VALUE`) first, then from the environment. `:-`
//! takes the default when the variable is unset or empty (as docker-compose and POSIX shells
//! do); `$${` writes a literal `${`. A variable that is unset and has no default is an error
//! naming it and the key. Keys are never substituted, only values; the config's fingerprint
//! is taken after substitution.

use std::collections::{BTreeMap, BTreeSet};

/// Where variables come from: the run's own, then the environment.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    given: BTreeMap<String, String>,
    environment: bool,
}

impl Vars {
    /// The environment only.
    pub fn environment() -> Self {
        Vars { given: BTreeMap::new(), environment: true }
    }

    /// `NAME=VALUE` pairs that win over the environment.
    pub fn with(mut self, given: impl IntoIterator<Item = (String, String)>) -> Self {
        self.given.extend(given);
        self
    }

    /// No environment: only the given pairs (for tests and embedding).
    pub fn only(given: impl IntoIterator<Item = (String, String)>) -> Self {
        Vars { given: given.into_iter().collect(), environment: false }
    }

    fn get(&self, name: &str) -> Option<String> {
        self.given.get(name).cloned().or_else(|| if self.environment { std::env::var(name).ok() } else { None })
    }

    /// Parses `NAME=VALUE` (of `--var`).
    pub fn parse_pair(s: &str) -> Result<(String, String), String> {
        let (name, value) = s.split_once('=').ok_or_else(|| format!("--var {s}: write NAME=VALUE"))?;
        if !valid_name(name) {
            return Err(format!(
                "--var {s}: `{name}` is not a variable name (a letter or _, then letters, digits and _)"
            ));
        }
        Ok((name.to_string(), value.to_string()))
    }

    /// Substitutes every string value of a TOML table in place. `Err((key, message))`. A given
    /// variable the table does not use is an error too (`--var NAME`): a misspelt name would
    /// leave the config's default in force, and the run compute what it was not asked to.
    pub fn substitute(&self, table: &mut toml::Table) -> Result<bool, (String, String)> {
        let mut changed = false;
        let mut used = BTreeSet::new();
        for (k, v) in table.iter_mut() {
            changed |= self.value(k, v, &mut used)?;
        }
        if let Some(name) = self.given.keys().find(|n| !used.contains(*n)) {
            let uses = match used.is_empty() {
                true => "uses no variables".to_string(),
                false => format!("uses {}", used.iter().cloned().collect::<Vec<_>>().join(", ")),
            };
            return Err((
                format!("--var {name}"),
                format!(
                    "the config has no ${{{name}}}, so this value would change nothing (it {uses}); check the name"
                ),
            ));
        }
        Ok(changed)
    }

    fn value(&self, key: &str, v: &mut toml::Value, used: &mut BTreeSet<String>) -> Result<bool, (String, String)> {
        match v {
            toml::Value::String(s) => match self.expand_noting(s, used) {
                Ok(Some(new)) => {
                    *s = new;
                    Ok(true)
                }
                Ok(None) => Ok(false),
                Err(m) => Err((key.to_string(), m)),
            },
            toml::Value::Array(items) => {
                let mut changed = false;
                for (i, item) in items.iter_mut().enumerate() {
                    changed |= self.value(&format!("{key}[{i}]"), item, used)?;
                }
                Ok(changed)
            }
            toml::Value::Table(t) => {
                let mut changed = false;
                for (k, item) in t.iter_mut() {
                    changed |= self.value(&format!("{key}.{k}"), item, used)?;
                }
                Ok(changed)
            }
            _ => Ok(false),
        }
    }

    /// The string with its variables replaced; `None` when it has none.
    pub fn expand(&self, s: &str) -> Result<Option<String>, String> {
        self.expand_noting(s, &mut BTreeSet::new())
    }

    /// [`Vars::expand`], adding the names it reads to `used`.
    fn expand_noting(&self, s: &str, used: &mut BTreeSet<String>) -> Result<Option<String>, String> {
        if !s.contains("${") {
            return Ok(None);
        }
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find("${") {
            if rest[..i].ends_with('$') {
                // `$${`: a literal `${`.
                out.push_str(&rest[..i - 1]);
                out.push_str("${");
                rest = &rest[i + 2..];
                continue;
            }
            out.push_str(&rest[..i]);
            let body = &rest[i + 2..];
            let end = body
                .find('}')
                .ok_or_else(|| format!("`${{` without a closing `}}` in {s:?} (write $${{ for a literal ${{)"))?;
            let inner = &body[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            if default.is_some_and(|d| d.contains("${")) {
                return Err(format!("`${{{inner}}}`: a default is plain text; variables inside it are not read"));
            }
            if !valid_name(name) {
                return Err(format!(
                    "`${{{inner}}}`: `{name}` is not a variable name (a letter or _, then letters, digits and _; a default is written ${{NAME:-default}})"
                ));
            }
            used.insert(name.to_string());
            match (self.get(name).filter(|v| default.is_none() || !v.is_empty()), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {
                    return Err(format!(
                        "the variable {name} is not set (set it in the environment, with --var {name}=VALUE, or give a default: ${{{name}:-default}})"
                    ))
                }
            }
            rest = &body[end + 1..];
        }
        out.push_str(rest);
        Ok(Some(out))
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars::only([("BUCKET".to_string(), "s3://raw".to_string()), ("EMPTY".to_string(), String::new())])
    }

    #[test]
    fn expands_names_defaults_and_escapes() {
        let v = vars();
        assert_eq!(v.expand("plain").unwrap(), None);
        assert_eq!(v.expand("${BUCKET}/orders").unwrap().unwrap(), "s3://raw/orders");
        assert_eq!(v.expand("${MISSING:-lake}/x").unwrap().unwrap(), "lake/x");
        assert_eq!(v.expand("${EMPTY:-d}").unwrap().unwrap(), "d");
        assert_eq!(v.expand("${EMPTY}").unwrap().unwrap(), "");
        assert_eq!(v.expand("a$${B}c").unwrap().unwrap(), "a${B}c");
        assert_eq!(v.expand("${BUCKET}${BUCKET:-x}").unwrap().unwrap(), "s3://raws3://raw");
    }

    #[test]
    fn refuses_what_it_cannot_expand() {
        let v = vars();
        assert!(v.expand("${MISSING}").unwrap_err().contains("MISSING is not set"));
        assert!(v.expand("${BUCKET").unwrap_err().contains("without a closing"));
        assert!(v.expand("${1X}").unwrap_err().contains("not a variable name"));
        assert!(v.expand("${A:-${B}}").unwrap_err().contains("plain text"));
        assert!(Vars::parse_pair("A").is_err());
        assert_eq!(Vars::parse_pair("A=b=c").unwrap(), ("A".into(), "b=c".into()));
    }

    #[test]
    fn a_given_variable_the_config_does_not_use_is_refused() {
        let mut t: toml::Table = toml::from_str("[aggregate]\nsql = \"x > ${MIN_AMOUNT:-0}\"").unwrap();
        let given = Vars::only([("MIN_AMOUT".to_string(), "300".to_string())]);
        let (key, m) = given.substitute(&mut t.clone()).unwrap_err();
        assert_eq!(key, "--var MIN_AMOUT");
        assert!(m.contains("no ${MIN_AMOUT}") && m.contains("uses MIN_AMOUNT"), "{m}");
        let right = Vars::only([("MIN_AMOUNT".to_string(), "300".to_string())]);
        assert!(right.substitute(&mut t).unwrap());
        assert_eq!(t["aggregate"]["sql"].as_str(), Some("x > 300"));
        // A `$${` is no variable.
        let mut t: toml::Table = toml::from_str("a = \"$${X}\"").unwrap();
        let (_, m) = Vars::only([("X".to_string(), "1".to_string())]).substitute(&mut t).unwrap_err();
        assert!(m.contains("uses no variables"), "{m}");
    }

    #[test]
    fn names_the_key() {
        let mut t: toml::Table =
            toml::from_str("[input]\nurl = \"${NOPE}/x\"\n[aggregate]\nm = [{ a = \"${NOPE}\" }]").unwrap();
        let (key, _) = vars().substitute(&mut t).unwrap_err();
        assert!(key == "aggregate.m[0].a" || key == "input.url", "{key}");
    }
}
