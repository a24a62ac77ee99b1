//! Test certificates made with the `openssl` command-line tool: a CA, a server certificate for
//! `localhost`/`127.0.0.1`, a client certificate it signed (`CN=alice,OU=Eng,O=Krust,C=US`)
//! and a client certificate of another, untrusted CA — as PEM files in one folder, with a
//! PEM key store (key + chain in one file, Kafka's `ssl.keystore.type=PEM` layout) for the
//! server. EC P-256 keys, PKCS#8, valid for two days. The server's key and chain also come as
//! the other stores Kafka reads, all protected by [`TEST_STORE_PASSWORD`]: a PEM key store whose
//! key is encrypted (`openssl pkcs8 -topk8 -v2 aes-256-cbc`: PBES2, PBKDF2-HMAC-SHA256,
//! AES-256-CBC), a PKCS12 key store (`openssl pkcs12 -export`: AES-256-CBC, SHA-256 MAC) and a
//! PKCS12 trust store holding the CA (`keytool -importcert`, which marks it trusted for Java).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dist::run_binary;
use crate::error::{HarnessError, Result};

/// Bound of one `openssl` run.
const OPENSSL_TIMEOUT: Duration = Duration::from_secs(30);

/// The subject of [`TestPki::client_cert`] as Kafka writes it (RFC 2253).
pub const TEST_CLIENT_DN: &str = "CN=alice,OU=Eng,O=Krust,C=US";

/// The password of every protected store of [`TestPki`] (`ssl.key.password`,
/// `ssl.keystore.password`, `ssl.truststore.password`).
pub const TEST_STORE_PASSWORD: &str = "krust-store-secret";

/// PEM files of a test PKI (see the module docs).
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The folder holding every file.
    pub dir: PathBuf,
    /// The trusted CA's certificate (a truststore for both sides).
    pub ca_cert: PathBuf,
    /// The server's key followed by its certificate and the CA's: `ssl.keystore.location`
    /// with `ssl.keystore.type=PEM`.
    pub server_keystore: PathBuf,
    /// The server's certificate alone.
    pub server_cert: PathBuf,
    /// The server's PKCS#8 key alone.
    pub server_key: PathBuf,
    /// [`TestPki::server_keystore`] with the key encrypted by [`TEST_STORE_PASSWORD`]
    /// (`ENCRYPTED PRIVATE KEY`).
    pub server_keystore_encrypted: PathBuf,
    /// The server's key alone, encrypted by [`TEST_STORE_PASSWORD`].
    pub server_key_encrypted: PathBuf,
    /// The server's key and chain as a PKCS12 key store (`openssl pkcs12 -export`, alias
    /// `kafka`), store and key password [`TEST_STORE_PASSWORD`].
    pub server_keystore_p12: PathBuf,
    /// The CA's certificate as a PKCS12 trust store (`keytool`), password
    /// [`TEST_STORE_PASSWORD`].
    pub truststore_p12: PathBuf,
    /// A client certificate signed by the CA, subject [`TEST_CLIENT_DN`].
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// A client certificate of another CA (`CN=mallory`), which the server does not trust.
    pub untrusted_cert: PathBuf,
    /// Its key.
    pub untrusted_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let mut all = vec![
        "-C".to_owned(),
        dir.display().to_string(),
        "openssl".to_owned(),
    ];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    // `env -C <dir>`: openssl writes its files relative to the PKI folder.
    run_binary("env", &all, None, OPENSSL_TIMEOUT)?.ok()?;
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text)
        .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| HarnessError::io(format!("reading {}", path.display()), e))
}

const EC: &[&str] = &[
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

fn ca(dir: &Path, name: &str, subject: &str) -> Result<()> {
    let key = format!("{name}.key");
    let cert = format!("{name}.crt");
    let mut args = vec!["req", "-x509"];
    args.extend_from_slice(EC);
    args.extend_from_slice(&[
        "-keyout", &key, "-out", &cert, "-days", "2", "-subj", subject,
    ]);
    openssl(dir, &args)
}

fn signed(dir: &Path, name: &str, ca: &str, subject: &str, ext: &str) -> Result<()> {
    let key = format!("{name}.key");
    let csr = format!("{name}.csr");
    let cert = format!("{name}.crt");
    let ext_file = format!("{name}.ext");
    write(&dir.join(&ext_file), ext)?;
    let mut args = vec!["req", "-new"];
    args.extend_from_slice(EC);
    args.extend_from_slice(&["-keyout", &key, "-out", &csr, "-subj", subject]);
    openssl(dir, &args)?;
    let ca_cert = format!("{ca}.crt");
    let ca_key = format!("{ca}.key");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &cert,
            "-days",
            "2",
            "-extfile",
            &ext_file,
        ],
    )
}

impl TestPki {
    /// Makes every file in `dir` (created if missing).
    ///
    /// # Errors
    /// `Io`, or `ToolFailed`/`Spawn` when `openssl` is missing or fails.
    pub fn generate(dir: impl Into<PathBuf>) -> Result<TestPki> {
        let dir: PathBuf = dir.into();
        std::fs::create_dir_all(&dir)
            .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
        ca(&dir, "ca", "/CN=krust-test-ca")?;
        ca(&dir, "rogue-ca", "/CN=krust-rogue-ca")?;
        signed(
            &dir,
            "server",
            "ca",
            "/CN=localhost",
            "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
        )?;
        signed(
            &dir,
            "client",
            "ca",
            "/C=US/O=Krust/OU=Eng/CN=alice",
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        )?;
        signed(
            &dir,
            "untrusted",
            "rogue-ca",
            "/CN=mallory",
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        )?;
        let keystore = dir.join("server-keystore.pem");
        let text = format!(
            "{}{}{}",
            read(&dir.join("server.key"))?,
            read(&dir.join("server.crt"))?,
            read(&dir.join("ca.crt"))?
        );
        write(&keystore, &text)?;
        let pass = format!("pass:{TEST_STORE_PASSWORD}");
        openssl(
            &dir,
            &[
                "pkcs8",
                "-topk8",
                "-v2",
                "aes-256-cbc",
                "-in",
                "server.key",
                "-out",
                "server-encrypted.key",
                "-passout",
                &pass,
            ],
        )?;
        let keystore_encrypted = dir.join("server-keystore-encrypted.pem");
        let text = format!(
            "{}{}{}",
            read(&dir.join("server-encrypted.key"))?,
            read(&dir.join("server.crt"))?,
            read(&dir.join("ca.crt"))?
        );
        write(&keystore_encrypted, &text)?;
        openssl(
            &dir,
            &[
                "pkcs12",
                "-export",
                "-inkey",
                "server.key",
                "-in",
                "server.crt",
                "-certfile",
                "ca.crt",
                "-name",
                "kafka",
                "-out",
                "server-keystore.p12",
                "-passout",
                &pass,
            ],
        )?;
        let ca_path = dir.join("ca.crt").display().to_string();
        let truststore_path = dir.join("truststore.p12").display().to_string();
        run_binary(
            "keytool",
            &[
                "-importcert",
                "-noprompt",
                "-storetype",
                "PKCS12",
                "-alias",
                "ca",
                "-file",
                ca_path.as_str(),
                "-keystore",
                truststore_path.as_str(),
                "-storepass",
                TEST_STORE_PASSWORD,
            ],
            None,
            OPENSSL_TIMEOUT,
        )?
        .ok()?;
        Ok(TestPki {
            server_keystore_encrypted: keystore_encrypted,
            server_key_encrypted: dir.join("server-encrypted.key"),
            server_keystore_p12: dir.join("server-keystore.p12"),
            truststore_p12: dir.join("truststore.p12"),
            ca_cert: dir.join("ca.crt"),
            server_keystore: keystore,
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
            untrusted_cert: dir.join("untrusted.crt"),
            untrusted_key: dir.join("untrusted.key"),
            dir,
        })
    }
}
