//! kafka-python's transactional producer (issue 13 acceptance): `scripts/clients/
//! kafka_python_txn.py` commits and aborts transactions on two partitions, copies records in
//! transactions with `send_offsets_to_transaction` (an aborted attempt, then a committed one),
//! and reads the output back read_committed (only committed records) and read_uncommitted
//! (everything). Against Apache Kafka 3.9 (the oracle: it proves the script right) and `krust
//! dev`, one single node at a time. Without the venv of `scripts/clients/install.sh` the tests
//! are skipped locally and fail in CI. Real processes, 127.0.0.1, bounded, killed on drop.

use std::sync::Mutex;
use std::time::Duration;

use krust_testkit::{BrokerUnderTest, KafkaDist, PythonClients};

const SCRIPT: &str = include_str!("../../../scripts/clients/kafka_python_txn.py");
const TIMEOUT: Duration = Duration::from_secs(240);

/// One broker at a time: the machine has two cores.
static BROKER: Mutex<()> = Mutex::new(());

fn run(python: &PythonClients, broker: &BrokerUnderTest) {
    let out = python
        .run_script(SCRIPT, &[&broker.bootstrap(), "kp-in", "kp-out"], TIMEOUT)
        .expect("run kafka_python_txn.py");
    assert!(
        out.success(),
        "kafka_python_txn.py against {} exited with {}\nstdout:\n{}\nstderr:\n{}\nbroker log:\n{}",
        broker.kind(),
        out.status,
        out.stdout,
        &out.stderr[out.stderr.len().saturating_sub(4000)..],
        broker.log_tail(40)
    );
    eprintln!("{}: {}", broker.kind(), out.stdout.trim());
}

#[test]
fn kafka_python_transactions_against_kafka() {
    let Some(python) = PythonClients::locate().expect("python venv") else {
        return;
    };
    let _serial = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dist = KafkaDist::locate().expect("Kafka 3.9");
    let broker = BrokerUnderTest::kafka(
        &dist,
        &[
            ("transaction.state.log.replication.factor", "1"),
            ("transaction.state.log.min.isr", "1"),
        ],
    )
    .expect("Kafka node");
    run(&python, &broker);
}

#[test]
fn kafka_python_transactions_against_krust_dev() {
    let Some(python) = PythonClients::locate().expect("python venv") else {
        return;
    };
    let _serial = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let broker = BrokerUnderTest::krust_dev(env!("CARGO_BIN_EXE_krust")).expect("krust dev");
    run(&python, &broker);
}
