//! The Rust types of settings: each row of the table names one, and its range is part of the type, so code that
//! reads `settings.kanban.failure_limit` gets a value that is already ≥ 1 and never re-checks or re-defaults it.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::table::Kind;
use crate::value::{Invalid, Value};

/// The largest duration setting berth accepts, in seconds (ten years): past it, time arithmetic would overflow.
pub const MAX_SECONDS: i64 = 10 * 365 * 24 * 3600;

/// The largest memory setting, in MB (1 PiB): past it the byte count would not fit the engine's field.
pub const MAX_MEMORY_MB: i64 = 1 << 30;

/// The largest CPU setting, in cores.
const MAX_CPUS: f64 = 1e6;

/// A type a setting's [`Value`] converts into; the conversion is the setting's range check, so a value accepted by
/// `config set`, `-c`, the file or the environment always converts.
pub trait FromValue: Sized {
    /// How the value's text is parsed.
    const KIND: Kind;

    /// # Errors
    /// A short reason (`-1 is below 1`) when the value is outside the type's range or of another kind.
    fn from_value(v: &Value) -> Result<Self, Invalid>;
}

fn wrong_kind<T>() -> Result<T, Invalid> {
    Err(Invalid::from("value of the wrong kind".to_owned()))
}

fn int_in(v: &Value, lo: i64, hi: Option<(i64, &str)>) -> Result<i64, Invalid> {
    let Value::Int(n) = v else { return wrong_kind() };
    let n = *n;
    if let Some((hi, what)) = hi
        && n > hi
    {
        return Err(Invalid::from(format!("{n} is above {hi}{what}")));
    }
    match lo {
        0 if n < 0 => Err(Invalid::from(format!("{n} is negative"))),
        1 if n < 1 => Err(Invalid::from(format!("{n} is below 1"))),
        _ => Ok(n),
    }
}

fn float_in(v: &Value, hi: f64, what: &str) -> Result<f64, Invalid> {
    let Value::Float(f) = v else { return wrong_kind() };
    let f = *f;
    if f > hi {
        Err(Invalid::from(format!("{f} is above {hi}{what}")))
    } else if f < 0.0 {
        Err(Invalid::from(format!("{f} is negative")))
    } else {
        Ok(f)
    }
}

const TEN_YEARS: &str = " (ten years)";

/// A non-negative number of seconds, at most [`MAX_SECONDS`] (0 often means "disabled").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seconds(u64);

impl Seconds {
    pub fn get(self) -> u64 {
        self.0
    }

    pub fn duration(self) -> Duration {
        Duration::from_secs(self.0)
    }
}

impl FromValue for Seconds {
    const KIND: Kind = Kind::Int;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        int_in(v, 0, Some((MAX_SECONDS, TEN_YEARS))).map(|n| Self(n.unsigned_abs()))
    }
}

/// A positive number of seconds, at most [`MAX_SECONDS`] (a lease or a time-to-live, which 0 would make useless).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PositiveSeconds(u64);

impl PositiveSeconds {
    pub fn get(self) -> u64 {
        self.0
    }

    pub fn duration(self) -> Duration {
        Duration::from_secs(self.0)
    }
}

impl FromValue for PositiveSeconds {
    const KIND: Kind = Kind::Int;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        int_in(v, 1, Some((MAX_SECONDS, TEN_YEARS))).map(|n| Self(n.unsigned_abs()))
    }
}

/// A non-negative, possibly fractional number of seconds, at most [`MAX_SECONDS`].
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct FloatSeconds(f64);

impl FloatSeconds {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl FromValue for FloatSeconds {
    const KIND: Kind = Kind::Float;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        float_in(v, MAX_SECONDS as f64, TEN_YEARS).map(Self)
    }
}

/// A non-negative, possibly fractional number of days, at most ten years (0 often means "off").
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct FloatDays(f64);

impl FloatDays {
    pub fn get(self) -> f64 {
        self.0
    }

    /// The same span in whole seconds (rounded down; at least 1 for any positive value), `None` when 0 (off).
    pub fn seconds(self) -> Option<i64> {
        // In range by construction: at most ten years of seconds.
        #[expect(clippy::cast_possible_truncation, reason = "at most MAX_SECONDS, checked at parse")]
        let secs = (self.0 * 86_400.0) as i64;
        (self.0 > 0.0).then_some(secs.max(1))
    }
}

impl FromValue for FloatDays {
    const KIND: Kind = Kind::Float;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        float_in(v, MAX_SECONDS as f64 / 86_400.0, TEN_YEARS).map(Self)
    }
}

/// A memory size in MB, 0 (no limit) to [`MAX_MEMORY_MB`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemoryMb(u64);

impl MemoryMb {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl FromValue for MemoryMb {
    const KIND: Kind = Kind::Int;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        int_in(v, 0, Some((MAX_MEMORY_MB, ""))).map(|n| Self(n.unsigned_abs()))
    }
}

/// CPU cores, 0 (no limit) to a million.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Cpus(f64);

impl Cpus {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl FromValue for Cpus {
    const KIND: Kind = Kind::Float;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        // Written as "1000000", not "1e6", in the message users see.
        let Value::Float(f) = v else { return wrong_kind() };
        if *f > MAX_CPUS {
            Err(Invalid::from(format!("{f} is above 1000000")))
        } else {
            float_in(v, MAX_CPUS, "").map(Self)
        }
    }
}

impl FromValue for bool {
    const KIND: Kind = Kind::Bool;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        match v {
            Value::Bool(b) => Ok(*b),
            _ => wrong_kind(),
        }
    }
}

/// A non-negative whole number (bytes, MB).
impl FromValue for u64 {
    const KIND: Kind = Kind::Int;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        int_in(v, 0, None).map(i64::unsigned_abs)
    }
}

/// A TCP port (0 to 65535).
impl FromValue for u16 {
    const KIND: Kind = Kind::Int;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        let n = int_in(v, 0, Some((i64::from(u16::MAX), "")))?;
        u16::try_from(n).map_err(|_| Invalid(format!("{n} is out of range")))
    }
}

/// A count (0 is often "none").
impl FromValue for u32 {
    const KIND: Kind = Kind::Int;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        let n = int_in(v, 0, Some((i64::from(u32::MAX), "")))?;
        u32::try_from(n).map_err(|_| Invalid(format!("{n} is out of range")))
    }
}

/// A count of at least one.
impl FromValue for NonZeroU32 {
    const KIND: Kind = Kind::Int;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        let n = int_in(v, 1, Some((i64::from(u32::MAX), "")))?;
        u32::try_from(n).ok().and_then(NonZeroU32::new).ok_or_else(|| Invalid(format!("{n} is out of range")))
    }
}

impl FromValue for String {
    const KIND: Kind = Kind::Str;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        match v {
            Value::Str(s) => Ok(s.clone()),
            _ => wrong_kind(),
        }
    }
}

impl FromValue for Vec<String> {
    const KIND: Kind = Kind::List;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        match v {
            Value::List(l) => Ok(l.clone()),
            _ => wrong_kind(),
        }
    }
}

impl FromValue for BTreeMap<String, String> {
    const KIND: Kind = Kind::Map;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        match v {
            Value::Map(m) => Ok(m.clone()),
            _ => wrong_kind(),
        }
    }
}

/// A cap: `None` means no cap.
impl FromValue for Option<u32> {
    const KIND: Kind = Kind::Cap;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        match v {
            Value::Cap(c) => Ok(*c),
            _ => wrong_kind(),
        }
    }
}

impl FromValue for BTreeMap<String, u32> {
    const KIND: Kind = Kind::CapMap;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        match v {
            Value::CapMap(m) => Ok(m.clone()),
            _ => wrong_kind(),
        }
    }
}

/// `terminal.docker_egress`: the policy, parsed once here.
impl FromValue for domain::egress::EgressPolicy {
    const KIND: Kind = Kind::Egress;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        let Value::Str(s) = v else { return wrong_kind() };
        Self::parse(s).map_err(Invalid::from)
    }
}

/// `terminal.docker_egress_overrides`: an egress policy per profile, each checked like the setting itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressOverrides(pub BTreeMap<String, domain::egress::EgressPolicy>);

impl FromValue for EgressOverrides {
    const KIND: Kind = Kind::Map;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        let Value::Map(m) = v else { return wrong_kind() };
        m.iter()
            .map(|(k, raw)| {
                domain::egress::EgressPolicy::parse(raw)
                    .map(|p| (k.clone(), p))
                    .map_err(|e| Invalid::from(format!("profile {k:?}: {e}")))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

/// `terminal.docker_credentials`: each variable's destinations, checked like `docker_egress` entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials(pub domain::egress::credentials::Credentials);

/// The credentials map of one JSON object: variable name → list of destinations (or one text of them).
fn credentials_of(v: &serde_json::Value) -> Result<domain::egress::credentials::Credentials, String> {
    let serde_json::Value::Object(m) = v else { return Err("expected an object of variable names".to_owned()) };
    let mut lists = BTreeMap::new();
    for (var, dests) in m {
        let list = match dests {
            serde_json::Value::String(s) => vec![s.clone()],
            serde_json::Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned).ok_or_else(|| format!("{var}: {i} is not a destination")))
                .collect::<Result<_, _>>()?,
            other => return Err(format!("{var}: expected a list of destinations, not {other}")),
        };
        lists.insert(var.clone(), list);
    }
    domain::egress::credentials::Credentials::parse(&lists)
}

impl FromValue for Credentials {
    const KIND: Kind = Kind::Json;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        let Value::Json(j) = v else { return wrong_kind() };
        credentials_of(j).map(Self).map_err(Invalid::from)
    }
}

/// `terminal.docker_credentials_overrides`: credentials per profile, each checked like the setting itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CredentialOverrides(pub BTreeMap<String, domain::egress::credentials::Credentials>);

impl FromValue for CredentialOverrides {
    const KIND: Kind = Kind::Json;

    fn from_value(v: &Value) -> Result<Self, Invalid> {
        let Value::Json(serde_json::Value::Object(m)) = v else { return wrong_kind() };
        m.iter()
            .map(|(k, c)| {
                credentials_of(c).map(|c| (k.clone(), c)).map_err(|e| Invalid::from(format!("profile {k:?}: {e}")))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}
