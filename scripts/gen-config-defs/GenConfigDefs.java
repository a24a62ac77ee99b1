// Prints crates/krust-config/src/defs.rs: facts (names, types, defaults, validators, dynamic
// scope, documentation) read from Kafka 3.9's own ConfigDefs at runtime. Run through gen.sh; the
// output is data, not Kafka code.
import java.lang.reflect.Field;
import java.util.*;
import org.apache.kafka.common.config.ConfigDef;

public class GenConfigDefs {
  static String str(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      switch (c) {
        case '\\': b.append("\\\\"); break;
        case '"': b.append("\\\""); break;
        case '\n': b.append("\\n"); break;
        case '\r': b.append("\\r"); break;
        case '\t': b.append("\\t"); break;
        default:
          if (c < 0x20) b.append(String.format("\\u{%x}", (int) c)); else b.append(c);
      }
    }
    return b.append("\"").toString();
  }

  static String lit(String s) {
    return s == null ? "None" : "Some(" + str(s) + ")";
  }

  // DescribeConfigsResponse ConfigType ids.
  static int typeId(ConfigDef.Type t) {
    switch (t) {
      case BOOLEAN: return 1;
      case STRING: return 2;
      case INT: return 3;
      case SHORT: return 4;
      case LONG: return 5;
      case DOUBLE: return 6;
      case LIST: return 7;
      case CLASS: return 8;
      case PASSWORD: return 9;
      default: return 0;
    }
  }

  static String kind(ConfigDef.Type t) {
    switch (t) {
      case BOOLEAN: return "ConfigKind::Boolean";
      case STRING: return "ConfigKind::String";
      case INT: return "ConfigKind::Int";
      case SHORT: return "ConfigKind::Short";
      case LONG: return "ConfigKind::Long";
      case DOUBLE: return "ConfigKind::Double";
      case LIST: return "ConfigKind::List";
      case CLASS: return "ConfigKind::Class";
      case PASSWORD: return "ConfigKind::Password";
      default: throw new IllegalStateException("type " + t);
    }
  }

  static String dflt(ConfigDef.ConfigKey k) {
    if (!k.hasDefault() || k.defaultValue == null) return null;
    return ConfigDef.convertToString(k.defaultValue, k.type);
  }

  static Object field(Object o, String name) {
    try {
      Field f = o.getClass().getDeclaredField(name);
      f.setAccessible(true);
      return f.get(o);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException(o.getClass() + "." + name, e);
    }
  }

  static String strings(Collection<?> values) {
    StringBuilder b = new StringBuilder("&[");
    for (Object v : values) b.append(str(String.valueOf(v))).append(", ");
    return b.append("]").toString();
  }

  static String bound(Object n) {
    if (n == null) return "None";
    return "Some(Bound { value: " + ((Number) n).doubleValue() + "_f64, text: " + str(n.toString()) + " })";
  }

  @SuppressWarnings("unchecked")
  static String validator(ConfigDef.Validator v) {
    if (v == null) return "Validator::None";
    if (v instanceof ConfigDef.Range)
      return "Validator::Range { min: " + bound(field(v, "min")) + ", max: " + bound(field(v, "max")) + " }";
    if (v instanceof ConfigDef.ValidString)
      return "Validator::ValidString(" + strings((List<String>) field(v, "validStrings")) + ")";
    if (v instanceof ConfigDef.ValidList)
      return "Validator::ValidList(" + strings((List<String>) field(field(v, "validString"), "validStrings")) + ")";
    if (v instanceof ConfigDef.CaseInsensitiveValidString)
      return "Validator::CaseInsensitiveValidString(" + strings((Set<String>) field(v, "validStrings")) + ")";
    if (v instanceof ConfigDef.NonEmptyString) return "Validator::NonEmptyString";
    if (v instanceof ConfigDef.NonNullValidator) return "Validator::NonNull";
    if (v instanceof ConfigDef.NonEmptyStringWithoutControlChars) return "Validator::NonEmptyStringWithoutControlChars";
    if (v instanceof ConfigDef.ListSize) return "Validator::ListSize(" + field(v, "maxSize") + ")";
    if (v instanceof ConfigDef.CompositeValidator) {
      StringBuilder b = new StringBuilder("Validator::Composite(&[");
      for (ConfigDef.Validator inner : (List<ConfigDef.Validator>) field(v, "validators"))
        b.append(validator(inner)).append(", ");
      return b.append("])").toString();
    }
    String cls = v.getClass().getName();
    int dollar = cls.indexOf("$$Lambda");
    if (dollar >= 0) cls = cls.substring(0, dollar) + "$$Lambda";
    return "Validator::Custom { class: " + str(cls) + ", description: " + str(v.toString()) + " }";
  }

  @SuppressWarnings("unchecked")
  public static void main(String[] args) {
    ConfigDef broker = kafka.server.KafkaConfig.configDef();
    scala.collection.Set<String> dynamic =
        (scala.collection.Set<String>) (Object) kafka.server.DynamicBrokerConfig$.MODULE$.AllDynamicConfigs();
    Map<String, String> modes = kafka.server.DynamicBrokerConfig$.MODULE$.dynamicConfigUpdateModes();
    ConfigDef topic = org.apache.kafka.storage.internals.log.LogConfig.configDefCopy();
    ConfigDef brokerQuotas = org.apache.kafka.server.config.QuotaConfigs.brokerQuotaConfigs();
    StringBuilder o = new StringBuilder();
    o.append("//! Kafka 3.9.1's broker (`KafkaConfig`), dynamic broker quota (`QuotaConfigs`) and topic\n");
    o.append("//! (`LogConfig`) config keys: name, type, default as Kafka prints it, validator, dynamic\n");
    o.append("//! update mode and documentation. GENERATED by `scripts/gen-config-defs/gen.sh` from the\n");
    o.append("//! Kafka jars; do not edit by hand.\n\n");
    o.append("use crate::def::{Bound, ConfigDefEntry, ConfigKind, DynamicScope, Validator};\n\n");
    emit(o, "BROKER_CONFIG_DEFS", "Every non-internal `KafkaConfig` key, sorted by name.", broker, dynamic, modes, true, false);
    emit(o, "INTERNAL_BROKER_CONFIG_DEFS", "The internal `KafkaConfig` keys (known, never described).", broker, dynamic, modes, true, true);
    emit(o, "BROKER_QUOTA_CONFIG_DEFS", "`QuotaConfigs.brokerQuotaConfigs`: keys only dynamic broker configs have.", brokerQuotas, dynamic, modes, false, false);
    emit(o, "TOPIC_CONFIG_DEFS", "Every non-internal `LogConfig` key, sorted by name.", topic, dynamic, modes, false, false);
    emit(o, "INTERNAL_TOPIC_CONFIG_DEFS", "The internal `LogConfig` keys (known, never described).", topic, dynamic, modes, false, true);
    System.out.print(o);
  }

  static void emit(StringBuilder o, String name, String doc, ConfigDef def,
                   scala.collection.Set<String> dynamic, Map<String, String> modes,
                   boolean brokerSide, boolean internal) {
    o.append("/// ").append(doc).append("\n");
    o.append("pub const ").append(name).append(": &[ConfigDefEntry] = &[\n");
    List<String> defined = new ArrayList<>(def.configKeys().keySet());
    for (String n : new TreeSet<>(def.configKeys().keySet())) {
      ConfigDef.ConfigKey k = def.configKeys().get(n);
      if (k.internalConfig != internal) continue;
      boolean isDynamic = brokerSide ? dynamic.contains(n) : true;
      String scope;
      if (!brokerSide) scope = "DynamicScope::ClusterWide";
      else if (!isDynamic) scope = "DynamicScope::ReadOnly";
      else if ("per-broker".equals(modes.get(n))) scope = "DynamicScope::PerBroker";
      else scope = "DynamicScope::ClusterWide";
      o.append("    ConfigDefEntry {\n");
      o.append("        name: ").append(str(n)).append(",\n");
      o.append("        order: ").append(defined.indexOf(n)).append(",\n");
      o.append("        config_type: ").append(typeId(k.type)).append(",\n");
      o.append("        kind: ").append(kind(k.type)).append(",\n");
      o.append("        default: ").append(lit(dflt(k))).append(",\n");
      o.append("        required: ").append(!k.hasDefault()).append(",\n");
      o.append("        dynamic: ").append(isDynamic).append(",\n");
      o.append("        scope: ").append(scope).append(",\n");
      o.append("        validator: ").append(validator(k.validator)).append(",\n");
      o.append("        documentation: ").append(lit(k.documentation)).append(",\n");
      o.append("    },\n");
    }
    o.append("];\n\n");
  }
}
