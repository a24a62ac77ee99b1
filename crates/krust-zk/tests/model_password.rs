//! Kafka's `PasswordEncoder`: values encrypted by Kafka 3.9.1 (`PasswordEncoder.encrypting(
//! new Password("secret"), null, <cipher>, 128, 4096).encode(new Password("pa55word"))`) decode
//! here, and krust's own encodings decode back.

use krust_zk::model::password::{
    MAX_DECODE_ITERATIONS, PasswordEncoder, PasswordError, is_password_config,
};
use rand::SeedableRng;

const KAFKA_CBC: &str = "initializationVector:lDuGSAWt3DI6dvvQJV/RFg==,keyLength:128,salt:5Kqz1xksnCSLdJM1zgRwJdn6cIIT3nyLbcrhK0Swt0cw/TXwteZWk1tx7ghHyRpr2l4uEB9IXmwx+9Qs1rsV4OynRIsu4XOi09R+6RKTMNBu5AemfNebbKWypyIczGM33KUwVgfGpWwn8+OxcD/iJ4z5X3mQ8YZa9EniLCPOWEAX+l28jKE+bLi1dE4/bJt6x5P9yqZAPV6+fkmRzAJPs42u8sW/cFdx6P18ZX3M6g+kaZda6/OPMX4/ukTi0OLN9+Ej6mbmyOIUmphzo8uZfDh8sB4QvviKgx36xclp6wuQMZWL5WW6TzejJp57K38euA96eFUd+V1VEuCf+Fj59g==,keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,iterations:4096,passwordLength:8,encryptedPassword:MeJLxsOgARqfJSGHJy+ZCw==";
const KAFKA_GCM: &str = "initializationVector:ldUuJqJWSaBqxhCZ,keyLength:128,salt:HgKgxaRriU5PecvtT5+4UI1Y0RRcOhSzRlAHlV2JztTDJg+RZtTyhGpVps4Yw0HtJCAK94I8GoNhHfGcTzx7vLpBa8QNvqD6blTrECbtflVM2sB19+/njF1CT4OAX7i7BnAflbjBqvOBRHlW0ghTvFyDM4j8y1ny9+RzJIJAdX0QtRYGGXsAkXpQbOjh0vQ2r2tfPGYOtDNkPQHEqVJB64Cvrb29TrmyI0Lg/8qlhgtBUOr9Av3sWxgtKxpWmav2YGO5B3BtTjZAggVrOLc9ynrPqCJA5lOWXrbERr+2LDakis9Lgyxnilv3smKA63vRvC5aHaR1N4MoWjesvQoUkg==,keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/GCM/NoPadding,authenticationTagLength:128,iterations:4096,passwordLength:8,encryptedPassword:yjEa68K2efXAZ9hDFwvWfGxcmrO2kRmu";

#[test]
fn decodes_what_kafka_encrypted() {
    let encoder = PasswordEncoder::new("secret");
    assert_eq!(encoder.decode(KAFKA_CBC).expect("CBC decodes"), "pa55word");
    assert_eq!(encoder.decode(KAFKA_GCM).expect("GCM decodes"), "pa55word");
    assert_eq!(
        PasswordEncoder::new("wrong").decode(KAFKA_CBC),
        Err(PasswordError::Decrypt)
    );
    assert!(matches!(
        encoder.decode("keyLength:128"),
        Err(PasswordError::Malformed { .. })
    ));
}

#[test]
fn encodes_in_kafkas_format_and_round_trips() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let encoder = PasswordEncoder::new("secret");
    let encoded = encoder.encode("pässword", &mut rng).expect("encodes");
    let keys: Vec<&str> = encoded
        .split(',')
        .filter_map(|kv| kv.split_once(':'))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        keys,
        [
            "initializationVector",
            "keyLength",
            "salt",
            "keyFactoryAlgorithm",
            "cipherAlgorithm",
            "iterations",
            "passwordLength",
            "encryptedPassword"
        ]
    );
    assert_eq!(encoder.decode(&encoded).expect("decodes"), "pässword");
    let gcm = PasswordEncoder::new("secret").with_parameters(
        "PBKDF2WithHmacSHA512",
        "AES/GCM/NoPadding",
        256,
        1024,
    );
    let encoded = gcm.encode("x", &mut rng).expect("encodes");
    assert!(encoded.contains("authenticationTagLength:128"));
    assert_eq!(
        PasswordEncoder::new("secret")
            .decode(&encoded)
            .expect("decodes"),
        "x"
    );
}

#[test]
fn password_configs_are_recognised_by_suffix() {
    assert!(is_password_config("ssl.keystore.password"));
    assert!(is_password_config(
        "listener.name.internal.ssl.key.password"
    ));
    assert!(is_password_config(
        "listener.name.sasl_ssl.plain.sasl.jaas.config"
    ));
    assert!(!is_password_config("ssl.keystore.location"));
    assert!(!is_password_config("password.encoder.secret"));
}

/// A fuzzing finding (`fuzz/`, target `znode_json`): a stored value naming 40,974,097 PBKDF2
/// iterations took the decoder over 14 s. Above [`MAX_DECODE_ITERATIONS`] it is refused at once
/// (Kafka's own values use 4096, which still decode above).
#[test]
fn an_absurd_iteration_count_is_refused_instead_of_hanging() {
    let encoder = PasswordEncoder::new("secret");
    let absurd = KAFKA_CBC.replace("iterations:4096", "iterations:40974097");
    assert_eq!(
        encoder.decode(&absurd),
        Err(PasswordError::TooManyIterations {
            iterations: 40_974_097,
            max: MAX_DECODE_ITERATIONS,
        })
    );
}
