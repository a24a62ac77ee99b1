//! `__consumer_offsets` record codec: golden bytes written out by hand from Kafka 3.9's
//! schemas (OffsetCommitKey/Value, GroupMetadataKey/Value: field order, int16 versions,
//! int16 string lengths, int32 byte/array lengths, compact encodings in flexible v4), the
//! partitioning helper against Java's `String.hashCode`, and malformed bytes as errors.

use bytes::Bytes;
use krust_broker::group::{
    CoordinatorRecord, GroupMetadataValue, MemberMetadata, OffsetCommitValue, RecordDecodeError,
    java_string_hash, partition_for_group,
};

fn offset_record(value: Option<OffsetCommitValue>) -> CoordinatorRecord {
    CoordinatorRecord::OffsetCommit {
        group: "g".into(),
        topic: "t".into(),
        partition: 3,
        value,
    }
}

#[test]
fn offset_commit_key_is_version_1_group_topic_partition() {
    let (key, value) = offset_record(None).encode();
    assert_eq!(&key[..], &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 3]);
    assert_eq!(value, None, "a tombstone has a null value");
}

#[test]
fn offset_commit_value_is_version_3_with_leader_epoch() {
    let value = OffsetCommitValue {
        offset: 100,
        leader_epoch: 5,
        metadata: "m".into(),
        commit_timestamp_ms: 1000,
        expire_timestamp_ms: None,
    };
    let record = offset_record(Some(value));
    let (key, bytes) = record.encode();
    let bytes = bytes.expect("value");
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0, 3,                      // version
        0, 0, 0, 0, 0, 0, 0, 100,  // offset
        0, 0, 0, 5,                // leaderEpoch
        0, 1, b'm',                // metadata
        0, 0, 0, 0, 0, 0, 3, 0xe8, // commitTimestamp
    ];
    assert_eq!(&bytes[..], golden);
    assert_eq!(CoordinatorRecord::decode(&key, Some(&bytes)), Ok(record));
}

#[test]
fn offset_commit_value_with_expire_timestamp_is_version_1() {
    let value = OffsetCommitValue {
        offset: 7,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: 1,
        expire_timestamp_ms: Some(2),
    };
    let record = offset_record(Some(value));
    let (key, bytes) = record.encode();
    let bytes = bytes.expect("value");
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0, 1,
        0, 0, 0, 0, 0, 0, 0, 7,   // offset
        0, 0,                     // metadata ""
        0, 0, 0, 0, 0, 0, 0, 1,   // commitTimestamp
        0, 0, 0, 0, 0, 0, 0, 2,   // expireTimestamp
    ];
    assert_eq!(&bytes[..], golden);
    assert_eq!(CoordinatorRecord::decode(&key, Some(&bytes)), Ok(record));
}

#[test]
fn offset_commit_value_v4_flexible_decodes_with_tagged_fields() {
    #[rustfmt::skip]
    let v4: &[u8] = &[
        0, 4,
        0, 0, 0, 0, 0, 0, 0, 9,  // offset
        0, 0, 0, 2,              // leaderEpoch
        3, b'a', b'b',           // compact string "ab" (length + 1)
        0, 0, 0, 0, 0, 0, 0, 5,  // commitTimestamp
        1, 0, 1, 0xff,           // one unknown tagged field (tag 0, 1 byte)
    ];
    let key = offset_record(None).encode().0;
    let decoded = CoordinatorRecord::decode(&key, Some(v4)).expect("v4 decodes");
    let CoordinatorRecord::OffsetCommit { value: Some(v), .. } = decoded else {
        panic!("offset")
    };
    assert_eq!(
        (
            v.offset,
            v.leader_epoch,
            v.metadata.as_str(),
            v.commit_timestamp_ms
        ),
        (9, 2, "ab", 5)
    );
}

fn sample_group() -> GroupMetadataValue {
    GroupMetadataValue {
        protocol_type: "consumer".into(),
        generation: 1,
        protocol: Some("range".into()),
        leader: Some("m1".into()),
        current_state_timestamp_ms: 10,
        members: vec![MemberMetadata {
            member_id: "m1".into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/h".into(),
            rebalance_timeout_ms: 300_000,
            session_timeout_ms: 10_000,
            subscription: Bytes::from_static(&[1, 2]),
            assignment: Bytes::from_static(&[3]),
        }],
    }
}

#[test]
fn group_metadata_key_v2_and_value_v3_golden_bytes() {
    let record = CoordinatorRecord::GroupMetadata {
        group: "grp".into(),
        value: Some(sample_group()),
    };
    let (key, value) = record.encode();
    assert_eq!(&key[..], &[0, 2, 0, 3, b'g', b'r', b'p']);
    let value = value.expect("value");
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0, 3,                                    // version
        0, 8, b'c', b'o', b'n', b's', b'u', b'm', b'e', b'r', // protocolType
        0, 0, 0, 1,                              // generation
        0, 5, b'r', b'a', b'n', b'g', b'e',      // protocol
        0, 2, b'm', b'1',                        // leader
        0, 0, 0, 0, 0, 0, 0, 10,                 // currentStateTimestamp
        0, 0, 0, 1,                              // members: 1
        0, 2, b'm', b'1',                        //   memberId
        0xff, 0xff,                              //   groupInstanceId null
        0, 1, b'c',                              //   clientId
        0, 2, b'/', b'h',                        //   clientHost
        0, 4, 0x93, 0xe0,                        //   rebalanceTimeout 300000
        0, 0, 0x27, 0x10,                        //   sessionTimeout 10000
        0, 0, 0, 2, 1, 2,                        //   subscription
        0, 0, 0, 1, 3,                           //   assignment
    ];
    assert_eq!(&value[..], golden);
    assert_eq!(CoordinatorRecord::decode(&key, Some(&value)), Ok(record));
}

#[test]
fn group_metadata_value_v0_uses_session_timeout_as_rebalance_timeout() {
    #[rustfmt::skip]
    let v0: &[u8] = &[
        0, 0,
        0, 0,                 // protocolType ""
        0, 0, 0, 4,           // generation
        0xff, 0xff,           // protocol null
        0xff, 0xff,           // leader null
        0, 0, 0, 1,
        0, 1, b'x', 0, 0, 0, 0, 0, 0, 0x27, 0x10, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let key = [0u8, 2, 0, 1, b'g'];
    let CoordinatorRecord::GroupMetadata { value: Some(v), .. } =
        CoordinatorRecord::decode(&key, Some(v0)).expect("v0 decodes")
    else {
        panic!("group metadata")
    };
    assert_eq!(v.generation, 4);
    assert_eq!(v.current_state_timestamp_ms, -1);
    assert_eq!(v.members[0].rebalance_timeout_ms, 10_000);
    assert_eq!(v.members[0].group_instance_id, None);
}

#[test]
fn malformed_records_are_errors_not_panics() {
    let key = CoordinatorRecord::GroupMetadata {
        group: "grp".into(),
        value: None,
    }
    .encode()
    .0;
    let full = CoordinatorRecord::GroupMetadata {
        group: "grp".into(),
        value: Some(sample_group()),
    }
    .encode()
    .1
    .expect("value");
    for cut in 0..full.len() {
        assert!(
            CoordinatorRecord::decode(&key, Some(&full[..cut])).is_err(),
            "cut at {cut}"
        );
    }
    let mut trailing = full.to_vec();
    trailing.push(0);
    assert!(matches!(
        CoordinatorRecord::decode(&key, Some(&trailing)),
        Err(RecordDecodeError::TrailingBytes { extra: 1, .. })
    ));
    assert_eq!(
        CoordinatorRecord::decode(&[0, 3, 0, 0], None),
        Err(RecordDecodeError::UnsupportedKeyVersion(3))
    );
    // A member count far beyond the bytes left is refused before allocating.
    let mut huge = full[..full.len() - 40].to_vec();
    huge.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
    assert!(CoordinatorRecord::decode(&key, Some(&huge)).is_err());
}

proptest::proptest! {
    #[test]
    fn arbitrary_record_bytes_never_panic(key in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
                                          value in proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..80))) {
        let _ = CoordinatorRecord::decode(&key, value.as_deref());
    }
}

#[test]
fn partition_for_group_matches_java_string_hash_code() {
    assert_eq!(java_string_hash(""), 0);
    assert_eq!(java_string_hash("a"), 97);
    assert_eq!(java_string_hash("abc"), 96_354);
    assert_eq!(java_string_hash("hello"), 99_162_322);
    // The classic String whose hashCode is Integer.MIN_VALUE: Utils.abs maps it to 0.
    assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    assert_eq!(partition_for_group("polygenelubricants", 50), 0);
    assert_eq!(partition_for_group("abc", 50), 4);
    assert_eq!(partition_for_group("hello", 50), 22);
    // UTF-16 code units, not bytes: U+00E9 is one unit (233).
    assert_eq!(java_string_hash("é"), 233);
    for g in ["", "x", "consumer-group-1", "élan"] {
        let p = partition_for_group(g, 50);
        assert!((0..50).contains(&p), "{g} -> {p}");
    }
}
