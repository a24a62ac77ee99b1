//! The admin APIs over the image's security parts, through the `QuorumController` as Kafka
//! 3.9's controller serves them: CreateAcls / DeleteAcls (`AclControlManager`),
//! AlterClientQuotas (`ClientQuotaControlManager`), AlterUserScramCredentials
//! (`ScramControlManager`). Each test checks the response (codes and Kafka's messages), the
//! records written and the image they leave.

use std::collections::BTreeMap;
use std::time::Instant;

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest,
    DeleteAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use krust_controller::heartbeat::HeartbeatConfig;
use krust_controller::{
    AdminConfig, CommittedBatch, ControllerAction, ControllerRequest, ControllerResponse,
    QuorumController, QuorumControllerConfig,
};
use krust_metadata::image::client_quotas::ClientQuotaEntity;
use krust_metadata::records::{MetadataRecord, QuotaEntity};
use krust_metadata::{BootstrapMetadata, MetadataVersion};

const CLUSTER_ID: &str = "J8qXRwI-Qyi2G0guFTiuYw";
const INVALID_REQUEST: i16 = 42;
const NOT_CONTROLLER: i16 = 41;

fn config(migration: bool, mv: MetadataVersion) -> QuorumControllerConfig {
    QuorumControllerConfig {
        node_id: 3000,
        cluster_id: CLUSTER_ID.to_owned(),
        heartbeat: HeartbeatConfig::default(),
        metadata_max_idle_interval_ms: 500,
        bootstrap: BootstrapMetadata::from_versions(mv, &BTreeMap::new(), "test")
            .expect("bootstraps"),
        default_num_partitions: 1,
        default_replication_factor: 1,
        kraft_version: 0,
        unclean_leader_election_interval_ms: 300_000,
        leader_imbalance_check_interval_ms: Some(300_000),
        topic_validation_defaults: krust_config::TopicValidationDefaults::default(),
        zk_migration_enabled: migration,
        max_zk_write_behind: None,
    }
}

/// One active controller whose appends commit at once.
struct Node {
    controller: QuorumController,
    log: Vec<CommittedBatch>,
    responses: Vec<(krust_controller::RequestId, ControllerResponse)>,
    now: Instant,
}

impl Node {
    fn start_with(config: QuorumControllerConfig, admin: AdminConfig) -> Self {
        let now = Instant::now();
        let mut node = Self {
            controller: QuorumController::new(config, 7).with_admin_config(admin),
            log: Vec::new(),
            responses: Vec::new(),
            now,
        };
        node.controller
            .handle_leader_change(now, true, 1, 0)
            .expect("activation");
        node.drain();
        node
    }

    fn start() -> Self {
        Self::start_with(
            config(false, MetadataVersion::LATEST_PRODUCTION),
            AdminConfig::default(),
        )
    }

    fn drain(&mut self) {
        while let Some(action) = self.controller.poll_action() {
            match action {
                ControllerAction::Append {
                    epoch,
                    base_offset,
                    records,
                } => {
                    let batch = CommittedBatch {
                        base_offset,
                        epoch,
                        records,
                    };
                    self.log.push(batch.clone());
                    self.controller
                        .handle_committed(self.now, &batch)
                        .expect("replays");
                }
                ControllerAction::Respond { id, response } => self.responses.push((id, response)),
            }
        }
    }

    /// The response and the records the request wrote.
    fn request(&mut self, request: ControllerRequest) -> (ControllerResponse, Vec<MetadataRecord>) {
        let before = self.log.len();
        let id = self.controller.handle_request(self.now, request);
        self.drain();
        let at = self
            .responses
            .iter()
            .position(|(i, _)| *i == id)
            .expect("answered");
        let records = self.log[before..]
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.record.clone()))
            .collect();
        (self.responses.remove(at).1, records)
    }

    fn create_acls(
        &mut self,
        creations: Vec<AclCreation>,
    ) -> (CreateAclsResponse, Vec<MetadataRecord>) {
        match self.request(ControllerRequest::CreateAcls(
            CreateAclsRequest::default().with_creations(creations),
        )) {
            (ControllerResponse::CreateAcls(r), records) => (r, records),
            other => panic!("not a CreateAcls response: {other:?}"),
        }
    }

    fn delete_acls(
        &mut self,
        filters: Vec<DeleteAclsFilter>,
    ) -> (DeleteAclsResponse, Vec<MetadataRecord>) {
        match self.request(ControllerRequest::DeleteAcls(
            DeleteAclsRequest::default().with_filters(filters),
        )) {
            (ControllerResponse::DeleteAcls(r), records) => (r, records),
            other => panic!("not a DeleteAcls response: {other:?}"),
        }
    }

    fn alter_quotas(
        &mut self,
        entries: Vec<EntryData>,
        validate_only: bool,
    ) -> (AlterClientQuotasResponse, Vec<MetadataRecord>) {
        match self.request(ControllerRequest::AlterClientQuotas(
            AlterClientQuotasRequest::default()
                .with_entries(entries)
                .with_validate_only(validate_only),
        )) {
            (ControllerResponse::AlterClientQuotas(r), records) => (r, records),
            other => panic!("not an AlterClientQuotas response: {other:?}"),
        }
    }

    fn alter_scram(
        &mut self,
        deletions: Vec<ScramCredentialDeletion>,
        upsertions: Vec<ScramCredentialUpsertion>,
    ) -> (AlterUserScramCredentialsResponse, Vec<MetadataRecord>) {
        match self.request(ControllerRequest::AlterUserScramCredentials(
            AlterUserScramCredentialsRequest::default()
                .with_deletions(deletions)
                .with_upsertions(upsertions),
        )) {
            (ControllerResponse::AlterUserScramCredentials(r), records) => (r, records),
            other => panic!("not an AlterUserScramCredentials response: {other:?}"),
        }
    }
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// ALLOW `operation` for User:alice from any host on `resource_type`/`name`/`pattern`.
fn creation(resource_type: i8, name: &str, pattern: i8, operation: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s("User:alice"))
        .with_host(s("*"))
        .with_operation(operation)
        .with_permission_type(3)
}

/// A filter matching everything (Kafka's `AclBindingFilter.ANY`).
fn any_filter() -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(1)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1)
}

fn results(r: &CreateAclsResponse) -> Vec<(i16, Option<String>)> {
    r.results
        .iter()
        .map(|x| {
            (
                x.error_code,
                x.error_message.as_ref().map(ToString::to_string),
            )
        })
        .collect()
}

const TOPIC: i8 = 2;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;

#[test]
fn create_acls_writes_one_record_per_new_acl_with_fresh_ids() {
    let mut node = Node::start();
    let (response, records) = node.create_acls(vec![
        creation(TOPIC, "orders", LITERAL, READ),
        creation(TOPIC, "ord", PREFIXED, WRITE),
        // The same ACL twice in one request: one record, both succeed.
        creation(TOPIC, "orders", LITERAL, READ),
    ]);
    assert_eq!(results(&response), vec![(0, Some(String::new())); 3]);
    assert_eq!(records.len(), 2, "{records:?}");
    let ids: Vec<_> = records
        .iter()
        .map(|r| match r {
            MetadataRecord::AccessControlEntry(a) => {
                assert_eq!(a.principal, "User:alice");
                assert_eq!(a.host, "*");
                a.id
            }
            other => panic!("unexpected record {other:?}"),
        })
        .collect();
    assert_ne!(ids[0], ids[1]);
    assert_eq!(node.controller.image().acls.acls.len(), 2);

    // An ACL equal to an existing one succeeds without a record.
    let (response, records) = node.create_acls(vec![creation(TOPIC, "orders", LITERAL, READ)]);
    assert_eq!(results(&response), vec![(0, Some(String::new()))]);
    assert!(records.is_empty(), "{records:?}");
}

#[test]
fn create_acls_refuses_per_item_and_per_request_as_kafka() {
    let mut node = Node::start();
    let (response, records) = node.create_acls(vec![
        creation(CLUSTER, "my-cluster", LITERAL, 7),
        creation(TOPIC, "", LITERAL, READ),
        creation(CLUSTER, "kafka-cluster", LITERAL, 7),
    ]);
    assert_eq!(
        results(&response),
        vec![
            (
                INVALID_REQUEST,
                Some("The only valid name for the CLUSTER resource is kafka-cluster".to_owned())
            ),
            (
                INVALID_REQUEST,
                Some("Invalid empty resource name".to_owned())
            ),
            // Kafka leaves a success's message at the schema default, "".
            (0, Some(String::new())),
        ]
    );
    assert_eq!(records.len(), 1, "only the valid ACL is written");

    // MATCH (or ANY) cannot be a binding: the request fails as a whole, as Kafka's handler
    // throws IllegalArgumentException (UNKNOWN_SERVER_ERROR, no message).
    let (response, records) = node.create_acls(vec![
        creation(TOPIC, "orders", LITERAL, READ),
        creation(TOPIC, "orders", 2, READ),
    ]);
    assert_eq!(results(&response), vec![(-1, None); 2]);
    assert!(records.is_empty());
    let (response, _) = node.create_acls(vec![creation(1, "orders", LITERAL, READ)]);
    assert_eq!(results(&response), vec![(-1, None)]);

    // An UNKNOWN code makes the request unparseable.
    let (response, records) = node.create_acls(vec![creation(TOPIC, "orders", LITERAL, 0)]);
    assert_eq!(response.results[0].error_code, INVALID_REQUEST);
    assert!(records.is_empty());
}

#[test]
fn delete_acls_removes_every_match_once() {
    let mut node = Node::start();
    node.create_acls(vec![
        creation(TOPIC, "orders", LITERAL, READ),
        creation(TOPIC, "*", LITERAL, READ),
        creation(TOPIC, "ord", PREFIXED, WRITE),
        creation(TOPIC, "payments", LITERAL, READ),
    ]);
    let by_match = any_filter()
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(Some(s("orders")))
        .with_pattern_type_filter(2);
    let reads = any_filter()
        .with_principal_filter(Some(s("User:alice")))
        .with_operation(READ);
    let (response, records) = node.delete_acls(vec![by_match, reads]);
    let names = |i: usize| {
        let mut names: Vec<String> = response.filter_results[i]
            .matching_acls
            .iter()
            .map(|m| m.resource_name.to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(response.filter_results[0].error_code, 0);
    assert_eq!(names(0), vec!["*", "ord", "orders"]);
    assert_eq!(names(1), vec!["*", "orders", "payments"]);
    assert_eq!(records.len(), 4, "each ACL removed once: {records:?}");
    assert!(node.controller.image().acls.acls.is_empty());

    // Nothing left to match: an empty result, no records.
    let (response, records) = node.delete_acls(vec![any_filter()]);
    assert!(response.filter_results[0].matching_acls.is_empty());
    assert!(records.is_empty());
}

#[test]
fn acls_without_an_authorizer_are_security_disabled() {
    let mut node = Node::start_with(
        config(false, MetadataVersion::LATEST_PRODUCTION),
        AdminConfig {
            authorizer_enabled: false,
            ..AdminConfig::default()
        },
    );
    let (response, records) = node.create_acls(vec![creation(TOPIC, "orders", LITERAL, READ)]);
    assert_eq!(
        results(&response),
        vec![(54, Some("No Authorizer is configured.".to_owned()))]
    );
    assert!(records.is_empty());
}

#[test]
fn admin_writes_are_refused_in_pre_migration() {
    let mut node = Node::start_with(
        config(true, MetadataVersion::LATEST_PRODUCTION),
        AdminConfig::default(),
    );
    let (response, _) = node.create_acls(vec![creation(TOPIC, "orders", LITERAL, READ)]);
    assert_eq!(response.results[0].error_code, NOT_CONTROLLER);
    let (response, _) = node.alter_quotas(
        vec![user_entry(Some("alice"), "producer_byte_rate", 1024.0)],
        false,
    );
    assert_eq!(response.entries[0].error_code, NOT_CONTROLLER);
    let (response, _) = node.alter_scram(Vec::new(), vec![upsertion("alice", 1, 4096)]);
    assert_eq!(response.results[0].error_code, NOT_CONTROLLER);
    assert_eq!(response.results[0].user.as_str(), "alice");
}

fn entity(parts: &[(&str, Option<&str>)]) -> Vec<EntityData> {
    parts
        .iter()
        .map(|(t, n)| {
            EntityData::default()
                .with_entity_type(s(t))
                .with_entity_name(n.map(s))
        })
        .collect()
}

fn op(key: &str, value: Option<f64>) -> OpData {
    OpData::default()
        .with_key(s(key))
        .with_value(value.unwrap_or(0.0))
        .with_remove(value.is_none())
}

fn user_entry(user: Option<&str>, key: &str, value: f64) -> EntryData {
    EntryData::default()
        .with_entity(entity(&[("user", user)]))
        .with_ops(vec![op(key, Some(value))])
}

fn quota_results(r: &AlterClientQuotasResponse) -> Vec<(i16, Option<String>)> {
    r.entries
        .iter()
        .map(|x| {
            (
                x.error_code,
                x.error_message.as_ref().map(ToString::to_string),
            )
        })
        .collect()
}

#[test]
fn quotas_are_set_changed_and_removed_with_records_only_for_changes() {
    let mut node = Node::start();
    let alice = ClientQuotaEntity(BTreeMap::from([(
        "user".to_owned(),
        Some("alice".to_owned()),
    )]));
    let (response, records) = node.alter_quotas(
        vec![
            EntryData::default()
                .with_entity(entity(&[("user", Some("alice"))]))
                .with_ops(vec![
                    op("producer_byte_rate", Some(1024.0)),
                    op("request_percentage", Some(12.5)),
                    op("consumer_byte_rate", None),
                ]),
        ],
        false,
    );
    assert_eq!(quota_results(&response), vec![(0, None)]);
    assert_eq!(
        records.len(),
        2,
        "removing an unset key writes nothing: {records:?}"
    );
    let quotas = node
        .controller
        .image()
        .client_quotas
        .entities
        .get(&alice)
        .cloned()
        .expect("alice");
    assert_eq!(quotas.get("producer_byte_rate"), Some(&1024.0));
    assert_eq!(quotas.get("request_percentage"), Some(&12.5));

    // The same value again: no record. A removal: a remove record.
    let (_, records) = node.alter_quotas(
        vec![user_entry(Some("alice"), "producer_byte_rate", 1024.0)],
        false,
    );
    assert!(records.is_empty());
    let (response, records) = node.alter_quotas(
        vec![
            EntryData::default()
                .with_entity(entity(&[("user", Some("alice"))]))
                .with_ops(vec![
                    op("producer_byte_rate", None),
                    op("request_percentage", None),
                ]),
        ],
        false,
    );
    assert_eq!(quota_results(&response), vec![(0, None)]);
    assert_eq!(records.len(), 2);
    assert!(
        records
            .iter()
            .all(|r| matches!(r, MetadataRecord::ClientQuota(q) if q.remove))
    );
    assert!(
        node.controller
            .image()
            .client_quotas
            .entities
            .get(&alice)
            .is_none()
    );
}

#[test]
fn quota_records_name_entities_as_kafka_and_validate_only_writes_nothing() {
    let mut node = Node::start();
    let entry = EntryData::default()
        .with_entity(entity(&[("user", Some("alice")), ("client-id", None)]))
        .with_ops(vec![op("consumer_byte_rate", Some(2048.0))]);
    let (response, records) = node.alter_quotas(vec![entry.clone()], true);
    assert_eq!(quota_results(&response), vec![(0, None)]);
    assert!(records.is_empty(), "validate_only");
    let (response, records) = node.alter_quotas(vec![entry], false);
    // Kafka's HashMaps put client-id before user (response and record alike).
    let types: Vec<&str> = response.entries[0]
        .entity
        .iter()
        .map(|e| e.entity_type.as_str())
        .collect();
    assert_eq!(types, vec!["client-id", "user"]);
    let MetadataRecord::ClientQuota(record) = &records[0] else {
        panic!("{records:?}");
    };
    assert_eq!(
        record.entity,
        vec![
            QuotaEntity {
                entity_type: "client-id".to_owned(),
                entity_name: None,
                ..QuotaEntity::default()
            },
            QuotaEntity {
                entity_type: "user".to_owned(),
                entity_name: Some("alice".to_owned()),
                ..QuotaEntity::default()
            },
        ]
    );
    assert_eq!(record.value, 2048.0);
}

#[test]
fn quota_refusals_carry_kafkas_messages() {
    let mut node = Node::start();
    let cases: Vec<(EntryData, &str)> = vec![
        (
            EntryData::default().with_ops(vec![op("producer_byte_rate", Some(1.0))]),
            "Invalid empty client quota entity",
        ),
        (
            EntryData::default()
                .with_entity(entity(&[("group", Some("g"))]))
                .with_ops(vec![op("producer_byte_rate", Some(1.0))]),
            "Unhandled client quota entity type: group",
        ),
        (
            EntryData::default()
                .with_entity(entity(&[("client-id", Some(""))]))
                .with_ops(vec![op("producer_byte_rate", Some(1.0))]),
            "Empty client-id not supported",
        ),
        (
            EntryData::default()
                .with_entity(entity(&[("ip", Some("10.0.0.1")), ("user", Some("bob"))]))
                .with_ops(vec![op("connection_creation_rate", Some(1.0))]),
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        ),
        (
            EntryData::default()
                .with_entity(entity(&[("ip", Some("not an address"))]))
                .with_ops(vec![op("connection_creation_rate", Some(1.0))]),
            "not an address is not a valid IP or resolvable host.",
        ),
        (
            EntryData::default()
                .with_entity(entity(&[("ip", None)]))
                .with_ops(vec![op("producer_byte_rate", Some(1.0))]),
            "Invalid configuration key producer_byte_rate",
        ),
        (
            user_entry(Some("carol"), "producer_byte_rate", 10.5),
            "producer_byte_rate cannot be a fractional value.",
        ),
        (
            user_entry(Some("dave"), "request_percentage", -1.0),
            "Quota request_percentage must be greater than 0",
        ),
        (
            EntryData::default()
                .with_entity(entity(&[("user", Some("erin"))]))
                .with_ops(vec![
                    op("producer_byte_rate", Some(1.0)),
                    op("producer_byte_rate", Some(2.0)),
                ]),
            // Kafka records the duplicate key, then overwrites it with the duplicate entity.
            "Ignoring duplicate entity ClientQuotaEntity(entries={user=erin})",
        ),
    ];
    for (entry, message) in cases {
        let (response, records) = node.alter_quotas(vec![entry], false);
        assert_eq!(
            quota_results(&response),
            vec![(INVALID_REQUEST, Some(message.to_owned()))]
        );
        assert!(records.is_empty(), "{message}: {records:?}");
    }
    // The same entity twice: the first change applies, the result is the refusal.
    let (response, records) = node.alter_quotas(
        vec![
            user_entry(None, "producer_byte_rate", 1.0),
            user_entry(None, "consumer_byte_rate", 1.0),
        ],
        false,
    );
    assert_eq!(
        quota_results(&response),
        vec![(
            INVALID_REQUEST,
            Some("Ignoring duplicate entity ClientQuotaEntity(entries={user=null})".to_owned())
        )]
    );
    assert_eq!(records.len(), 1, "{records:?}");
}

fn upsertion(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
    ScramCredentialUpsertion::default()
        .with_name(s(name))
        .with_mechanism(mechanism)
        .with_iterations(iterations)
        .with_salt(bytes::Bytes::from_static(b"salt"))
        .with_salted_password(bytes::Bytes::from_static(b"salted-password"))
}

fn deletion(name: &str, mechanism: i8) -> ScramCredentialDeletion {
    ScramCredentialDeletion::default()
        .with_name(s(name))
        .with_mechanism(mechanism)
}

fn scram_results(r: &AlterUserScramCredentialsResponse) -> BTreeMap<String, (i16, Option<String>)> {
    r.results
        .iter()
        .map(|x| {
            (
                x.user.to_string(),
                (
                    x.error_code,
                    x.error_message.as_ref().map(ToString::to_string),
                ),
            )
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn scram_upsertion_stores_derived_keys_and_deletion_removes_them() {
    let mut node = Node::start();
    let (response, records) = node.alter_scram(Vec::new(), vec![upsertion("alice", 1, 8192)]);
    assert_eq!(scram_results(&response)["alice"], (0, None));
    let [MetadataRecord::UserScramCredential(record)] = records.as_slice() else {
        panic!("{records:?}");
    };
    assert_eq!(record.name, "alice");
    assert_eq!(record.mechanism, 1);
    assert_eq!(record.salt, b"salt");
    assert_eq!(record.iterations, 8192);
    // H(HMAC(SaltedPassword, "Client Key")) and HMAC(SaltedPassword, "Server Key"), SHA-256.
    assert_eq!(
        hex(&record.stored_key),
        "b5e4c0d06efa385d664035071e661a9b86967d64d141de9984fc5470c3f67b3d"
    );
    assert_eq!(
        hex(&record.server_key),
        "9152f5894df2e7fe1ea179f2f6dbc4c4f7ecd5ac45708d2d9dc622c715330377"
    );
    assert!(
        node.controller
            .image()
            .scram
            .credentials
            .contains_key(&(1, "alice".to_owned()))
    );

    let (response, records) = node.alter_scram(vec![deletion("alice", 1)], Vec::new());
    assert_eq!(scram_results(&response)["alice"], (0, None));
    assert!(
        matches!(records.as_slice(), [MetadataRecord::RemoveUserScramCredential(r)] if r.name == "alice")
    );
    assert!(node.controller.image().scram.credentials.is_empty());
}

#[test]
fn scram_refusals_carry_kafkas_codes_and_messages() {
    let mut node = Node::start();
    let (response, records) = node.alter_scram(
        vec![deletion("ghost", 1), deletion("twice", 1)],
        vec![
            upsertion("few", 1, 100),
            upsertion("many", 2, 20_000),
            upsertion("", 1, 4096),
            upsertion("mech", 3, 4096),
            upsertion("twice", 1, 4096),
            upsertion("ok", 2, 4096),
        ],
    );
    let results = scram_results(&response);
    let error = |code: i16, message: &str| (code, Some(message.to_owned()));
    assert_eq!(
        results["ghost"],
        error(
            91,
            "Attempt to delete a user credential that does not exist"
        )
    );
    // "twice" was refused as a deletion first (no credential), so the upsertion is skipped.
    assert_eq!(
        results["twice"],
        error(
            91,
            "Attempt to delete a user credential that does not exist"
        )
    );
    assert_eq!(results["few"], error(93, "Too few iterations"));
    assert_eq!(results["many"], error(93, "Too many iterations"));
    assert_eq!(results[""], error(93, "Username must not be empty"));
    assert_eq!(results["mech"], error(33, "Unknown SCRAM mechanism"));
    assert_eq!(results["ok"], (0, None));
    assert_eq!(results.len(), 7);
    assert_eq!(records.len(), 1, "only the valid upsertion: {records:?}");

    // The same user twice (any mechanisms): DUPLICATE_RESOURCE, nothing written for it.
    let (response, records) = node.alter_scram(
        Vec::new(),
        vec![upsertion("bob", 1, 4096), upsertion("bob", 2, 4096)],
    );
    assert_eq!(
        scram_results(&response)["bob"],
        error(
            92,
            "A user credential cannot be altered twice in the same request"
        )
    );
    assert!(records.is_empty());
}

#[test]
fn scram_needs_metadata_version_3_5_iv2() {
    let mut node = Node::start_with(
        config(false, MetadataVersion::IBP_3_4_IV0),
        AdminConfig::default(),
    );
    let (response, records) = node.alter_scram(Vec::new(), vec![upsertion("alice", 1, 4096)]);
    assert_eq!(
        scram_results(&response)["alice"],
        (
            35,
            Some("The current metadata.version does not support SCRAM".to_owned())
        )
    );
    assert!(records.is_empty());
}

mod delegation_tokens {
    use super::*;

    use hmac::{Hmac, Mac};
    use kafka_protocol::messages::create_delegation_token_request::CreatableRenewers;
    use kafka_protocol::messages::{
        CreateDelegationTokenRequest, CreateDelegationTokenResponse, ExpireDelegationTokenRequest,
        RenewDelegationTokenRequest,
    };
    use krust_controller::delegation_tokens::{DelegationTokenConfig, Principal, TokenContext};

    const SECRET: &str = "the-secret";
    const NOW: i64 = 1_700_000_000_000;
    const DAY: i64 = 86_400_000;

    fn node(secret: Option<&str>, mv: MetadataVersion) -> Node {
        Node::start_with(
            config(false, mv),
            AdminConfig {
                delegation_tokens: DelegationTokenConfig {
                    secret_key: secret.map(str::to_owned),
                    ..DelegationTokenConfig::default()
                },
                ..AdminConfig::default()
            },
        )
    }

    fn caller(name: &str, now_ms: i64) -> TokenContext {
        TokenContext {
            principal: Principal {
                principal_type: "User".to_owned(),
                name: name.to_owned(),
            },
            token_authenticated: false,
            forwarded: true,
            now_ms,
            api_version: 3,
        }
    }

    fn create(
        node: &mut Node,
        context: TokenContext,
        request: CreateDelegationTokenRequest,
    ) -> (CreateDelegationTokenResponse, Vec<MetadataRecord>) {
        match node.request(ControllerRequest::CreateDelegationToken { request, context }) {
            (ControllerResponse::CreateDelegationToken(r), records) => (*r, records),
            other => panic!("{other:?}"),
        }
    }

    fn renew(
        node: &mut Node,
        context: TokenContext,
        hmac: &[u8],
        period: i64,
    ) -> (i16, i64, usize) {
        let request = RenewDelegationTokenRequest::default()
            .with_hmac(bytes::Bytes::copy_from_slice(hmac))
            .with_renew_period_ms(period);
        match node.request(ControllerRequest::RenewDelegationToken { request, context }) {
            (ControllerResponse::RenewDelegationToken(r), records) => {
                (r.error_code, r.expiry_timestamp_ms, records.len())
            }
            other => panic!("{other:?}"),
        }
    }

    fn expire(
        node: &mut Node,
        context: TokenContext,
        hmac: &[u8],
        period: i64,
    ) -> (i16, i64, Vec<MetadataRecord>) {
        let request = ExpireDelegationTokenRequest::default()
            .with_hmac(bytes::Bytes::copy_from_slice(hmac))
            .with_expiry_time_period_ms(period);
        match node.request(ControllerRequest::ExpireDelegationToken { request, context }) {
            (ControllerResponse::ExpireDelegationToken(r), records) => {
                (r.error_code, r.expiry_timestamp_ms, records)
            }
            other => panic!("{other:?}"),
        }
    }

    fn with_renewer(
        request: CreateDelegationTokenRequest,
        principal_type: &str,
        name: &str,
    ) -> CreateDelegationTokenRequest {
        request.with_renewers(vec![
            CreatableRenewers::default()
                .with_principal_type(s(principal_type))
                .with_principal_name(s(name)),
        ])
    }

    /// The wall clock of [`expired_tokens_are_swept_every_check_interval`]: two days after
    /// `NOW`, when a token issued at `NOW` with the default one-day expiry has expired.
    fn two_days_later() -> i64 {
        NOW + 2 * DAY
    }

    /// Kafka's `sweepExpiredDelegationTokens`: every `delegation.token.expiry.check.interval.ms`
    /// the active controller removes the tokens past their expiry, and only those.
    #[test]
    fn expired_tokens_are_swept_every_check_interval() {
        let now = Instant::now();
        let mut node = Node {
            controller: QuorumController::new(config(false, MetadataVersion::LATEST_PRODUCTION), 7)
                .with_admin_config(AdminConfig {
                    delegation_tokens: DelegationTokenConfig {
                        secret_key: Some(SECRET.to_owned()),
                        expiry_check_interval_ms: 1000,
                        ..DelegationTokenConfig::default()
                    },
                    ..AdminConfig::default()
                })
                .with_wall_clock(two_days_later),
            log: Vec::new(),
            responses: Vec::new(),
            now,
        };
        node.controller
            .handle_leader_change(now, true, 1, 0)
            .expect("activation");
        node.drain();
        let (old, _) = create(
            &mut node,
            caller("alice", NOW),
            CreateDelegationTokenRequest::default(),
        );
        let (young, _) = create(
            &mut node,
            caller("alice", NOW + 2 * DAY - 1000),
            CreateDelegationTokenRequest::default(),
        );
        assert_eq!((old.error_code, young.error_code), (0, 0));
        let due = node
            .controller
            .poll_timeout()
            .expect("a sweep is scheduled");
        assert!(
            due <= now + std::time::Duration::from_millis(1000),
            "{due:?}"
        );
        // Not yet due: nothing is swept.
        node.controller
            .handle_timeout(now + std::time::Duration::from_millis(500));
        node.drain();
        assert_eq!(node.controller.image().delegation_tokens.tokens.len(), 2);
        let before = node.log.len();
        node.now = now + std::time::Duration::from_millis(1000);
        node.controller.handle_timeout(node.now);
        node.drain();
        let swept: Vec<&MetadataRecord> = node.log[before..]
            .iter()
            .flat_map(|b| b.records.iter().map(|r| &r.record))
            .filter(|r| !matches!(r, MetadataRecord::NoOp(_)))
            .collect();
        let [MetadataRecord::RemoveDelegationToken(removed)] = swept.as_slice() else {
            panic!("one removal: {swept:?}");
        };
        assert_eq!(removed.token_id, old.token_id.to_string());
        let tokens = &node.controller.image().delegation_tokens.tokens;
        assert!(tokens.contains_key(young.token_id.as_str()), "{tokens:?}");
        assert_eq!(tokens.len(), 1);
        assert!(
            node.controller.poll_timeout().is_some(),
            "the next sweep is scheduled"
        );
    }

    #[test]
    fn a_token_is_created_renewed_and_expired_as_kafka_does() {
        let mut node = node(Some(SECRET), MetadataVersion::LATEST_PRODUCTION);
        let request = with_renewer(CreateDelegationTokenRequest::default(), "User", "bob");
        let (response, records) = create(&mut node, caller("alice", NOW), request);
        assert_eq!(response.error_code, 0);
        assert_eq!(response.principal_name.as_str(), "alice");
        assert_eq!(response.token_requester_principal_name.as_str(), "alice");
        assert_eq!(response.issue_timestamp_ms, NOW);
        assert_eq!(response.max_timestamp_ms, NOW + 7 * DAY);
        assert_eq!(response.expiry_timestamp_ms, NOW + DAY);
        let token_id = response.token_id.to_string();
        assert_eq!(token_id.len(), 22, "a Kafka Uuid string");
        let mut mac = <Hmac<sha2::Sha512> as Mac>::new_from_slice(SECRET.as_bytes()).expect("key");
        mac.update(token_id.as_bytes());
        let hmac = mac.finalize().into_bytes().to_vec();
        assert_eq!(response.hmac.to_vec(), hmac, "HmacSHA512(secret, token id)");
        let [MetadataRecord::DelegationToken(record)] = records.as_slice() else {
            panic!("{records:?}");
        };
        assert_eq!(record.owner, "User:alice");
        assert_eq!(record.requester, "User:alice");
        assert_eq!(record.renewers, vec!["User:bob".to_owned()]);
        assert_eq!(record.token_id, token_id);
        assert_eq!(record.expiration_timestamp, NOW + DAY);

        // A renewer renews (capped by the period asked for); a stranger may not.
        assert_eq!(
            renew(&mut node, caller("bob", NOW + 10), &hmac, 1000),
            (0, NOW + 1010, 1)
        );
        assert_eq!(
            renew(&mut node, caller("eve", NOW + 10), &hmac, 1000),
            (63, 0, 0)
        );
        assert_eq!(
            renew(&mut node, caller("alice", NOW), b"not-a-token", 0),
            (62, 0, 0)
        );
        // After its expiry it cannot be renewed.
        assert_eq!(
            renew(&mut node, caller("alice", NOW + 5000), &hmac, 0),
            (66, 0, 0)
        );
        let token = node
            .controller
            .image()
            .delegation_tokens
            .tokens
            .get(&token_id)
            .cloned()
            .expect("token");
        assert_eq!(token.expiration_timestamp_ms, NOW + 1010);

        // A negative period removes it at once.
        let (code, expiry, records) = expire(&mut node, caller("alice", NOW + 20), &hmac, -1);
        assert_eq!((code, expiry), (0, NOW + 20));
        assert!(
            matches!(records.as_slice(), [MetadataRecord::RemoveDelegationToken(r)] if r.token_id == token_id)
        );
        assert!(node.controller.image().delegation_tokens.tokens.is_empty());
    }

    #[test]
    fn an_owner_may_be_named_and_max_lifetime_shortened() {
        let mut node = node(Some(SECRET), MetadataVersion::LATEST_PRODUCTION);
        let request = CreateDelegationTokenRequest::default()
            .with_owner_principal_type(Some(s("User")))
            .with_owner_principal_name(Some(s("carol")))
            .with_max_lifetime_ms(3_600_000);
        let (response, records) = create(&mut node, caller("admin", NOW), request);
        assert_eq!(response.error_code, 0);
        assert_eq!(response.principal_name.as_str(), "carol");
        assert_eq!(response.token_requester_principal_name.as_str(), "admin");
        assert_eq!(response.max_timestamp_ms, NOW + 3_600_000);
        assert_eq!(response.expiry_timestamp_ms, NOW + 3_600_000);
        let [MetadataRecord::DelegationToken(record)] = records.as_slice() else {
            panic!("{records:?}");
        };
        assert_eq!(record.owner, "User:carol");
        assert_eq!(record.requester, "User:admin");

        // Below v3 the response has no requester fields: Kafka leaves them at their defaults.
        let v1 = TokenContext {
            api_version: 1,
            ..caller("admin", NOW)
        };
        let (response, records) = create(&mut node, v1, CreateDelegationTokenRequest::default());
        assert_eq!(response.error_code, 0);
        assert_eq!(response.principal_name.as_str(), "admin");
        assert!(response.token_requester_principal_name.is_empty());
        let [MetadataRecord::DelegationToken(record)] = records.as_slice() else {
            panic!("{records:?}");
        };
        assert_eq!(
            record.requester, "User:admin",
            "the record names the requester"
        );
    }

    #[test]
    fn token_requests_are_refused_with_kafkas_codes() {
        // No secret: DELEGATION_TOKEN_AUTH_DISABLED.
        let mut disabled = node(None, MetadataVersion::LATEST_PRODUCTION);
        let (response, records) = create(
            &mut disabled,
            caller("alice", NOW),
            CreateDelegationTokenRequest::default(),
        );
        assert_eq!(response.error_code, 61);
        assert!(records.is_empty());
        assert_eq!(renew(&mut disabled, caller("alice", NOW), b"x", 0).0, 61);

        let mut node = node(Some(SECRET), MetadataVersion::LATEST_PRODUCTION);
        // Straight to the PLAINTEXT controller listener: not allowed, Kafka's error timestamps.
        let direct = TokenContext {
            forwarded: false,
            ..caller("alice", NOW)
        };
        let (response, _) = create(
            &mut node,
            direct.clone(),
            CreateDelegationTokenRequest::default(),
        );
        assert_eq!(response.error_code, 64);
        assert_eq!(response.max_timestamp_ms, -1);
        assert_eq!(renew(&mut node, direct, b"x", 0), (64, -1, 0));
        // Authenticated with a token: not allowed.
        let with_token = TokenContext {
            token_authenticated: true,
            ..caller("alice", NOW)
        };
        assert_eq!(
            create(
                &mut node,
                with_token,
                CreateDelegationTokenRequest::default()
            )
            .0
            .error_code,
            64
        );
        // A renewer that is not a user.
        let request = with_renewer(CreateDelegationTokenRequest::default(), "Group", "g");
        let (response, records) = create(&mut node, caller("alice", NOW), request);
        assert_eq!(response.error_code, 67);
        assert!(records.is_empty());

        // metadata.version below 3.6-IV2.
        let mut old = node_at(MetadataVersion::IBP_3_5_IV2);
        assert_eq!(
            create(
                &mut old,
                caller("alice", NOW),
                CreateDelegationTokenRequest::default()
            )
            .0
            .error_code,
            35
        );
    }

    fn node_at(mv: MetadataVersion) -> Node {
        node(Some(SECRET), mv)
    }
}
