//! Typed setting values and the parse rules for their text, YAML and JSON forms.

use std::collections::BTreeMap;

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;

use crate::table::Kind;

/// Why a value is not valid for its setting (`-1 is below 1`, `expected a whole number`), shown after the key and
/// the raw text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl From<String> for Invalid {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for Invalid {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// A parsed setting value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<String>),
    Map(BTreeMap<String, String>),
    Cap(Option<u32>),
    CapMap(BTreeMap<String, u32>),
    Json(Json),
}

/// Parses a boolean the way berth documents it: true/false/1/0/yes/no/on/off in any case.
pub fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

fn parse_cap(raw: &str) -> Result<Option<u32>, Invalid> {
    let t = raw.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("none") || t.eq_ignore_ascii_case("null") {
        return Ok(None);
    }
    match t.parse::<i64>() {
        Ok(n) if n >= 1 => u32::try_from(n).map(Some).map_err(|_| Invalid::from("too large")),
        Ok(n) => Err(Invalid::from(format!("{n} is below 1"))),
        Err(_) => Err(Invalid::from("not a whole number".to_owned())),
    }
}

fn json_scalar_to_string(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn from_json(kind: Kind, json: &Json) -> Result<Value, Invalid> {
    match kind {
        Kind::List => match json {
            Json::Array(items) => items
                .iter()
                .map(|i| json_scalar_to_string(i).ok_or_else(|| Invalid(format!("list item {i} is not a string"))))
                .collect::<Result<_, _>>()
                .map(Value::List),
            _ => Err(Invalid::from("expected a JSON array".to_owned())),
        },
        Kind::Map => match json {
            Json::Object(m) => m
                .iter()
                .map(|(k, v)| {
                    json_scalar_to_string(v)
                        .map(|s| (k.clone(), s))
                        .ok_or_else(|| Invalid(format!("value of {k:?} is not a scalar")))
                })
                .collect::<Result<_, _>>()
                .map(Value::Map),
            _ => Err(Invalid::from("expected a JSON object".to_owned())),
        },
        Kind::CapMap => match json {
            Json::Object(m) => m
                .iter()
                .map(|(k, v)| {
                    let n = v.as_i64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()));
                    match n {
                        Some(n) if n >= 1 => u32::try_from(n)
                            .map(|n| (k.clone(), n))
                            .map_err(|_| Invalid(format!("cap of {k:?} is too large"))),
                        _ => Err(Invalid::from(format!("cap of {k:?} must be a whole number ≥ 1"))),
                    }
                })
                .collect::<Result<_, _>>()
                .map(Value::CapMap),
            _ => Err(Invalid::from("expected a JSON object".to_owned())),
        },
        Kind::Json => match json {
            Json::Object(_) => Ok(Value::Json(json.clone())),
            _ => Err(Invalid::from("expected a JSON object".to_owned())),
        },
        _ => Err(Invalid::from("not a structured setting".to_owned())),
    }
}

/// Parses the text form (environment, `-c`, `config set`) strictly.
///
/// # Errors
/// A short reason when the text is not a valid value of `kind`.
pub fn parse_text(kind: Kind, raw: &str) -> Result<Value, Invalid> {
    match kind {
        Kind::Bool => parse_bool(raw).map(Value::Bool).ok_or_else(|| {
            let hint = domain::suggest::did_you_mean(raw.trim(), ["true", "false", "yes", "no", "on", "off"]);
            Invalid(format!("expected true/false/1/0/yes/no/on/off{hint}"))
        }),
        Kind::Int => raw.trim().parse().map(Value::Int).map_err(|_| Invalid::from("expected a whole number")),
        Kind::Float => match raw.trim().parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Float(f)),
            _ => Err(Invalid::from("expected a number".to_owned())),
        },
        Kind::Str | Kind::Egress => Ok(Value::Str(raw.to_owned())),
        Kind::Cap => parse_cap(raw).map(Value::Cap),
        Kind::List | Kind::Map | Kind::CapMap | Kind::Json => {
            let json: Json = serde_json::from_str(raw).map_err(|e| Invalid(format!("expected valid JSON ({e})")))?;
            from_json(kind, &json)
        }
    }
}

/// Converts a YAML value from a config file; `Ok(None)` for null (use the default).
///
/// # Errors
/// A short reason when the YAML value does not fit `kind`.
pub fn from_yaml(kind: Kind, yaml: &Yaml) -> Result<Option<Value>, Invalid> {
    let scalar = |y: &Yaml| -> Option<String> {
        match y {
            Yaml::String(s) => Some(s.clone()),
            Yaml::Number(n) => Some(n.to_string()),
            Yaml::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    };
    if matches!(yaml, Yaml::Null) {
        return Ok(None);
    }
    let v = match kind {
        Kind::Bool => match yaml {
            Yaml::Bool(b) => Value::Bool(*b),
            other => parse_text(kind, &scalar(other).ok_or("expected a boolean")?)?,
        },
        Kind::Int | Kind::Float | Kind::Cap | Kind::Str => parse_text(kind, &scalar(yaml).ok_or("expected a scalar")?)?,
        Kind::Egress => match yaml {
            Yaml::Sequence(items) => Value::Str(items.iter().filter_map(scalar).collect::<Vec<_>>().join(",")),
            other => Value::Str(scalar(other).ok_or("expected `all`, `none` or a list of destinations")?),
        },
        Kind::List => match yaml {
            Yaml::Sequence(items) => Value::List(items.iter().filter_map(scalar).collect()),
            Yaml::String(s) => parse_text(kind, s)?,
            _ => return Err(Invalid::from("expected a list".to_owned())),
        },
        Kind::Map | Kind::CapMap => match yaml {
            Yaml::Mapping(m) => {
                let json = Json::Object(
                    m.iter().filter_map(|(k, v)| Some((scalar(k)?, serde_json::to_value(v).ok()?))).collect(),
                );
                let json = match (kind, json) {
                    // Upstream drops nested values in docker_env rather than failing the whole map.
                    (Kind::Map, Json::Object(o)) => Json::Object(
                        o.into_iter().filter(|(_, v)| !v.is_array() && !v.is_object() && !v.is_null()).collect(),
                    ),
                    (_, j) => j,
                };
                from_json(kind, &json)?
            }
            Yaml::String(s) => parse_text(kind, s)?,
            _ => return Err(Invalid::from("expected a mapping".to_owned())),
        },
        Kind::Json => match yaml {
            Yaml::String(s) => parse_text(kind, s)?,
            other => from_json(kind, &serde_json::to_value(other).map_err(|e| Invalid(format!("{e}")))?)?,
        },
    };
    Ok(Some(v))
}

impl Value {
    /// The text form, which [`parse_text`] reads back to the same value (the environment surface).
    pub fn to_text(&self) -> String {
        match self {
            Self::Bool(b) => b.to_string(),
            Self::Int(i) => i.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Str(s) => s.clone(),
            Self::Cap(c) => c.map(|c| c.to_string()).unwrap_or_default(),
            Self::List(_) | Self::Map(_) | Self::CapMap(_) | Self::Json(_) => self.to_json().to_string(),
        }
    }

    /// The JSON form (`--json` output).
    pub fn to_json(&self) -> Json {
        match self {
            Self::Bool(b) => Json::Bool(*b),
            Self::Int(i) => Json::from(*i),
            Self::Float(f) => Json::from(*f),
            Self::Str(s) => Json::String(s.clone()),
            Self::Cap(c) => c.map_or(Json::Null, Json::from),
            Self::List(l) => Json::from(l.clone()),
            Self::Map(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), Json::String(v.clone()))).collect()),
            Self::CapMap(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), Json::from(*v))).collect()),
            Self::Json(j) => j.clone(),
        }
    }

    /// The YAML form written by `config set`.
    pub fn to_yaml(&self) -> Yaml {
        serde_yaml_ng::to_value(self.to_json()).unwrap_or(Yaml::Null)
    }
}
