//! Durations as Kubernetes and Flux users write them (`90s`, `5m`, `1m30s`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written the way Kubernetes and Flux users write them:
/// `500ms`, `90s`, `5m`, `1h`, `1m30s`, or a bare number of seconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub const fn secs(s: u64) -> Self {
        HumanDuration(Duration::from_secs(s))
    }
    pub fn get(self) -> Duration {
        self.0
    }
}

impl fmt::Debug for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if !ms.is_multiple_of(1000) {
            return write!(f, "{ms}ms");
        }
        let mut secs = self.0.as_secs();
        let mut out = String::new();
        for (unit, size) in [("h", 3600), ("m", 60)] {
            if secs >= size {
                out.push_str(&format!("{}{unit}", secs / size));
                secs %= size;
            }
        }
        if secs > 0 || out.is_empty() {
            out.push_str(&format!("{secs}s"));
        }
        f.write_str(&out)
    }
}

impl std::str::FromStr for HumanDuration {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_duration(text).map(HumanDuration)
    }
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "invalid duration `{text}`: expected a number like `90s` or `5m`"
            ));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("invalid duration `{text}`"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        total += match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number * 60),
            "h" => Duration::from_secs(number * 3600),
            _ => {
                return Err(format!(
                    "invalid duration `{text}`: unknown unit `{unit}` (use ms, s, m or h)"
                ));
            }
        };
    }
    Ok(total)
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as `90s`, `5m` or `1h`")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(HumanDuration(Duration::from_secs(v)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(|v| HumanDuration(Duration::from_secs(v)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                parse_duration(v).map(HumanDuration).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_compound_and_bare_durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("m5").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn displays_canonically() {
        assert_eq!(HumanDuration::secs(90).to_string(), "1m30s");
        assert_eq!(HumanDuration::secs(3600).to_string(), "1h");
        assert_eq!(HumanDuration::secs(0).to_string(), "0s");
        assert_eq!(
            HumanDuration(Duration::from_millis(1500)).to_string(),
            "1500ms"
        );
    }
}
