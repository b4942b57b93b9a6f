//! Declarative tables for options and statistics.
//!
//! Every option is declared once, with its unit, default, environment variable and one line of
//! doc, in an [`options_table!`](crate::options_table); every statistic once, with its unit and
//! doc, in a [`stats_table!`](crate::stats_table). Documentation, environment parsing, the lab's
//! printing and the JSON output all derive from those declarations.

/// One row of an options table.
#[derive(Clone, Copy, Debug)]
pub struct OptionDoc {
    /// Field name.
    pub name: &'static str,
    /// Unit or type.
    pub unit: &'static str,
    /// Default, as written in the declaration.
    pub default: &'static str,
    /// Environment variable that overrides it.
    pub env: &'static str,
    /// One line of documentation.
    pub doc: &'static str,
    /// An experiment: the library reads its environment variable only when
    /// `VMARENA_EXPERIMENTS=1` (see [`experiments_enabled`]); its default is what every user
    /// gets.
    pub experiment: bool,
}

/// True when `VMARENA_EXPERIMENTS` is `1`: the environment variables of options marked as
/// experiments are read too (the lab's comparisons set it). Otherwise a set variable of an
/// experiment is reported once on stderr and ignored.
pub fn experiments_enabled() -> bool {
    std::env::var("VMARENA_EXPERIMENTS").is_ok_and(|v| v.trim() == "1")
}

/// An experiment's variable `env` was set without `VMARENA_EXPERIMENTS=1`: say so, once per
/// variable and process.
pub fn report_ignored_experiment(env: &'static str) {
    static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.contains(&env) {
        seen.push(env);
        eprintln!("vmarena: ignoring {env}: an experiment, read only with VMARENA_EXPERIMENTS=1");
    }
}

/// The one word that marks an option as an experiment in an options table.
pub const fn is_experiment_marker(word: &str) -> bool {
    let (a, b) = (word.as_bytes(), b"experiment");
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// One row of a statistics table.
#[derive(Clone, Copy, Debug)]
pub struct StatDoc {
    /// Field name.
    pub name: &'static str,
    /// Unit.
    pub unit: &'static str,
    /// One line of documentation.
    pub doc: &'static str,
}

/// Parsing of option values from environment text.
pub trait OptionValue: Sized {
    /// Parse `s`, or explain why not.
    fn parse_option(s: &str) -> Result<Self, String>;
}

macro_rules! int_option {
    ($($t:ty),*) => {$(
        impl OptionValue for $t {
            fn parse_option(s: &str) -> Result<Self, String> {
                let s = s.trim().replace('_', "");
                let (digits, mult) = match s.chars().last() {
                    Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
                    Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
                    Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
                    Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
                    _ => (&s[..], 1),
                };
                let v: u64 = digits.parse().map_err(|_| format!("'{s}' is not a number"))?;
                let v = v.checked_mul(mult).ok_or_else(|| format!("'{s}' overflows"))?;
                <$t>::try_from(v).map_err(|_| format!("'{s}' is out of range"))
            }
        }
    )*};
}
int_option!(u32, u64, usize);

impl OptionValue for bool {
    fn parse_option(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            o => Err(format!("'{o}' is not a boolean (1/0, true/false, yes/no, on/off)")),
        }
    }
}

/// Declare an options struct, its `Default`, its table and its environment parsing at once.
#[macro_export]
macro_rules! options_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( #[doc = $doc:literal] $field:ident : $ty:ty = $default:expr, $unit:literal, $env:literal $(, $experiment:ident)?; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name { $( #[doc = $doc] pub $field: $ty, )* }

        impl Default for $name {
            fn default() -> Self { $name { $( $field: $default, )* } }
        }

        impl $name {
            /// Every option: name, unit, default, environment variable, doc.
            pub const TABLE: &'static [$crate::table::OptionDoc] = &[
                $( $crate::table::OptionDoc {
                    name: stringify!($field), unit: $unit, default: stringify!($default),
                    env: $env, doc: $doc.trim_ascii(),
                    experiment: false $( || $crate::table::is_experiment_marker(stringify!($experiment)) )?,
                }, )*
            ];

            /// Every field's value, as `Debug` prints it, in the table's order.
            pub fn values(&self) -> Vec<(&'static str, String)> {
                vec![ $( (stringify!($field), format!("{:?}", self.$field)), )* ]
            }

            /// Override fields from the environment variables of the table (an experiment's
            /// only with `VMARENA_EXPERIMENTS=1`).
            pub fn with_env(mut self) -> Result<Self, String> {
                $(
                    $( const {
                        assert!(
                            $crate::table::is_experiment_marker(stringify!($experiment)),
                            "an option is marked with the word `experiment` or nothing"
                        )
                    }; )?
                    let experiment = false $( || $crate::table::is_experiment_marker(stringify!($experiment)) )?;
                    if experiment && !$crate::table::experiments_enabled() {
                        if std::env::var_os($env).is_some() {
                            $crate::table::report_ignored_experiment($env);
                        }
                    } else if let Ok(v) = std::env::var($env) {
                        self.$field = <$ty as $crate::table::OptionValue>::parse_option(&v)
                            .map_err(|e| format!("{}: {}", $env, e))?;
                    }
                )*
                Ok(self)
            }

            /// The defaults overridden from the environment. A malformed variable is reported
            /// on stderr and the defaults are kept (for libraries, which have no caller to
            /// return the error to).
            pub fn from_env() -> Self {
                Self::default().with_env_or_report()
            }

            /// These values overridden from the environment; on a malformed variable it is
            /// reported on stderr and these values are kept, as [`Self::from_env`] does.
            pub fn with_env_or_report(self) -> Self {
                self.clone().with_env().unwrap_or_else(|e| {
                    eprintln!("vmarena: ignoring {e}");
                    self
                })
            }
        }
    };
}

/// Declare a statistics struct of `u64` fields with its table and a `(name, value)` view.
#[macro_export]
macro_rules! stats_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( #[doc = $doc:literal] $field:ident, $unit:literal; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $name { $( #[doc = $doc] pub $field: u64, )* }

        impl $name {
            /// Every statistic: name, unit, doc.
            pub const TABLE: &'static [$crate::table::StatDoc] = &[
                $( $crate::table::StatDoc { name: stringify!($field), unit: $unit, doc: $doc.trim_ascii() }, )*
            ];

            /// `(name, value)` for every statistic, in table order.
            pub fn values(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($field), self.$field), )* ]
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_values() {
        assert_eq!(u64::parse_option("64M"), Ok(64 << 20));
        assert_eq!(usize::parse_option("1_000"), Ok(1000));
        assert!(u32::parse_option("5G").is_err());
        assert!(u64::parse_option("x").is_err());
        assert_eq!(bool::parse_option("on"), Ok(true));
        assert!(bool::parse_option("maybe").is_err());
    }
}
