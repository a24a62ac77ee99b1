//! The shape of one config definition (Kafka's `ConfigDef.ConfigKey`), filled in by the
//! generated tables of [`crate::defs`].

/// `ConfigDef.Type`: how a value is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigKind {
    /// `true`/`false`, case-insensitive.
    Boolean,
    /// Any string (trimmed).
    String,
    /// `Integer.parseInt`.
    Int,
    /// `Short.parseShort`.
    Short,
    /// `Long.parseLong`.
    Long,
    /// `Double.parseDouble`.
    Double,
    /// Comma-separated, items trimmed; an empty value is the empty list.
    List,
    /// A Java class name (krust checks only that it is one).
    Class,
    /// A secret: never echoed.
    Password,
}

impl ConfigKind {
    /// Kafka's name of the type, as in "Not a number of type LONG".
    #[must_use]
    pub fn java_name(self) -> &'static str {
        match self {
            Self::Boolean => "BOOLEAN",
            Self::String => "STRING",
            Self::Int => "INT",
            Self::Short => "SHORT",
            Self::Long => "LONG",
            Self::Double => "DOUBLE",
            Self::List => "LIST",
            Self::Class => "CLASS",
            Self::Password => "PASSWORD",
        }
    }
}

/// How a broker config may be changed at runtime (`DynamicBrokerConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DynamicScope {
    /// Only in `server.properties`: "Cannot update these configs dynamically".
    ReadOnly,
    /// Only for one broker (`ConfigResource` broker `"<id>"`): "Cannot update these configs at
    /// default cluster level, broker id must be specified".
    PerBroker,
    /// For one broker or as the cluster default (`""`). Topic configs are all of this scope.
    ClusterWide,
}

/// A bound of a `ConfigDef.Range`: its value and how Kafka prints it in messages (`14`, `0.5`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The bound as a double (Kafka compares `doubleValue()`s).
    pub value: f64,
    /// `Number.toString()` of the bound as Kafka declared it.
    pub text: &'static str,
}

/// A `ConfigDef.Validator`, run on the parsed value (defaults included).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Validator {
    /// No validator.
    None,
    /// `Range.atLeast` / `Range.between`.
    Range {
        /// Lower bound, inclusive.
        min: Option<Bound>,
        /// Upper bound, inclusive.
        max: Option<Bound>,
    },
    /// `ValidString.in(…)`: case-sensitive.
    ValidString(&'static [&'static str]),
    /// `ValidList.in(…)`: every item of a LIST is one of these.
    ValidList(&'static [&'static str]),
    /// `CaseInsensitiveValidString.in(…)`, the names upper-cased in Kafka's message order.
    CaseInsensitiveValidString(&'static [&'static str]),
    /// `NonEmptyString`.
    NonEmptyString,
    /// `NonNullValidator`.
    NonNull,
    /// `NonEmptyStringWithoutControlChars`.
    NonEmptyStringWithoutControlChars,
    /// `ListSize.atMostOfSize(n)`.
    ListSize(usize),
    /// `CompositeValidator.of(…)`: each in order.
    Composite(&'static [Validator]),
    /// A validator class of its own; `crate::validate` knows the ones krust checks by class.
    Custom {
        /// The Java class (lambdas shortened to `…$$Lambda`).
        class: &'static str,
        /// Its `toString()`, as Kafka's documentation prints the valid values.
        description: &'static str,
    },
}

/// One config key as Kafka 3.9's `ConfigDef` defines it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigDefEntry {
    /// Config name.
    pub name: &'static str,
    /// Position in Kafka's definition order (`ConfigDef.parse` checks keys in this order, so
    /// of several bad values the first in this order is the one reported).
    pub order: u16,
    /// DescribeConfigs `config_type` (`PASSWORD` = 9 is sensitive).
    pub config_type: i8,
    /// How values are parsed.
    pub kind: ConfigKind,
    /// Default as Kafka prints it (`ConfigDef.convertToString`); `None` for a null default.
    pub default: Option<&'static str>,
    /// No default at all: `ConfigDef.parse` refuses a config set without it.
    pub required: bool,
    /// Whether it can be changed dynamically (`DynamicBrokerConfig.AllDynamicConfigs`);
    /// DescribeConfigs reports the others as `read_only`.
    pub dynamic: bool,
    /// Per-broker, cluster-wide or read-only.
    pub scope: DynamicScope,
    /// Checked on every parsed value.
    pub validator: Validator,
    /// Kafka's documentation string.
    pub documentation: Option<&'static str>,
}

impl ConfigDefEntry {
    /// Whether the value is a secret (DescribeConfigs `is_sensitive`; never echoed).
    #[must_use]
    pub fn is_sensitive(&self) -> bool {
        self.kind == ConfigKind::Password
    }
}
