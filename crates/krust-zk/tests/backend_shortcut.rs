//! `read_tree_with` and the topic shortcut: partition states read straight from a topic's
//! assignment give the same states as a full read, without listing the levels between.

use krust_zk::backend::{MemZk, ZkBackend as _, read_tree, read_tree_with};
use krust_zk::model::topics::partition_states_of_topic;
use krust_zk::ops::{CreateMode, ZkOp};

fn create(path: &str, data: &[u8]) -> ZkOp {
    ZkOp::Create {
        path: path.to_owned(),
        data: data.to_vec(),
        mode: CreateMode::Persistent,
    }
}

#[tokio::test]
async fn topic_shortcut_reads_the_assigned_partition_states() {
    let zk = MemZk::default();
    for (path, data) in [
        ("/brokers", &b""[..]),
        ("/brokers/topics", b""),
        (
            "/brokers/topics/t",
            br#"{"version":2,"partitions":{"0":[1],"1":[1]},"adding_replicas":{},"removing_replicas":{}}"#,
        ),
        ("/brokers/topics/t/partitions", b""),
        ("/brokers/topics/t/partitions/0", b""),
        ("/brokers/topics/t/partitions/0/state", b"s0"),
        ("/brokers/topics/t/partitions/1", b""),
        ("/brokers/topics/t/partitions/1/state", b"s1"),
        // Not in the assignment: the shortcut does not read it (Kafka's reader neither).
        ("/brokers/topics/t/partitions/7", b""),
        ("/brokers/topics/t/partitions/7/state", b"s7"),
        // Not a topic assignment: listed as usual.
        ("/brokers/topics/bad", b"{not json"),
        ("/brokers/topics/bad/partitions", b""),
    ] {
        zk.apply(&create(path, data)).await.expect(path);
    }
    let full = read_tree(&zk, &["/brokers/topics"])
        .await
        .expect("full read");
    let short = read_tree_with(&zk, &["/brokers/topics"], partition_states_of_topic)
        .await
        .expect("read with the shortcut");
    for p in ["0", "1"] {
        let path = format!("/brokers/topics/t/partitions/{p}/state");
        assert_eq!(
            short.get(&path).ok().map(|n| n.0),
            full.get(&path).ok().map(|n| n.0)
        );
        assert!(short.get(&path).is_ok());
    }
    assert!(full.get("/brokers/topics/t/partitions/7/state").is_ok());
    assert!(short.get("/brokers/topics/t/partitions/7/state").is_err());
    assert!(short.get("/brokers/topics/bad/partitions").is_ok());
    assert_eq!(
        partition_states_of_topic("/brokers/topics/t/partitions", b"{}"),
        None
    );
}
