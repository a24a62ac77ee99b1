//! A classic group's in-memory state (Kafka 3.9 `ClassicGroup`): members, generation,
//! selected protocol, leader and the state machine
//! Empty → PreparingRebalance → CompletingRebalance → Stable (→ PreparingRebalance …), Dead.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::records::{GroupMetadataValue, MemberMetadata, consumer_subscription_topics};
use super::shard::RequestId;

/// Kafka's classic group states (`ClassicGroupState`), with their wire names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupState {
    /// No members; offsets may remain.
    Empty,
    /// Collecting JoinGroups for the next generation.
    PreparingRebalance,
    /// Join responses sent; waiting for the leader's SyncGroup.
    CompletingRebalance,
    /// Assignment distributed; members heartbeat.
    Stable,
    /// Being removed.
    Dead,
}

impl GroupState {
    /// Kafka's name (`ListGroups`, `DescribeGroups`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    /// Whether Kafka allows `self → next` (`ClassicGroupState.validPreviousStates`).
    #[must_use]
    pub fn may_become(self, next: GroupState) -> bool {
        use GroupState::*;
        match next {
            Empty => matches!(self, PreparingRebalance),
            PreparingRebalance => matches!(self, Empty | CompletingRebalance | Stable),
            CompletingRebalance => matches!(self, PreparingRebalance),
            Stable => matches!(self, CompletingRebalance),
            Dead => true,
        }
    }
}

/// One member of a classic group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMember {
    /// Member id.
    pub member_id: String,
    /// KIP-345 static id.
    pub group_instance_id: Option<String>,
    /// Client id (request header).
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Supported protocols in preference order: (name, metadata).
    pub protocols: Vec<(String, Bytes)>,
    /// Assignment from the last SyncGroup.
    pub assignment: Bytes,
    /// Parked JoinGroup, answered when the join phase completes.
    pub awaiting_join: Option<RequestId>,
    /// Parked SyncGroup, answered when the leader's assignment is stored.
    pub awaiting_sync: Option<RequestId>,
    /// Session expiry deadline.
    pub session_deadline_ms: i64,
    /// Join order (the first joined member leads).
    pub join_seq: u64,
    /// Added in the current join phase: may expire while awaiting join (after
    /// `new_member_join_timeout_ms`).
    pub is_new: bool,
}

impl ClassicMember {
    /// Metadata of `protocol`, if supported.
    #[must_use]
    pub fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m)
    }

    /// Whether the member joined for the coming generation.
    #[must_use]
    pub fn is_awaiting_join(&self) -> bool {
        self.awaiting_join.is_some()
    }

    /// Whether the session deadline applies now (Kafka's `hasSatisfiedHeartbeat` negated): a
    /// member parked in a join or sync is kept alive unless it is new.
    #[must_use]
    pub fn session_can_expire(&self) -> bool {
        self.is_new || (self.awaiting_join.is_none() && self.awaiting_sync.is_none())
    }
}

/// A classic group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicGroup {
    /// Group id.
    pub group_id: String,
    /// State.
    pub state: GroupState,
    /// When `state` was entered.
    pub state_timestamp_ms: i64,
    /// Generation id (0 for a new group).
    pub generation_id: i32,
    /// Protocol type; `None` until the first member joins (a simple group keeps none).
    pub protocol_type: Option<String>,
    /// Selected protocol of the current generation.
    pub protocol_name: Option<String>,
    /// Leader member id.
    pub leader_id: Option<String>,
    /// Members by id.
    pub members: BTreeMap<String, ClassicMember>,
    /// KIP-394 members that got MEMBER_ID_REQUIRED: member id → session deadline.
    pub pending_members: BTreeMap<String, i64>,
    /// Members that got a join response but did not sync yet.
    pub pending_sync: BTreeSet<String>,
    /// Join-phase deadline while PreparingRebalance.
    pub join_deadline_ms: Option<i64>,
    /// Initial delayed join (group was empty): time the delay may still be extended by.
    pub initial_delay_remaining_ms: Option<i64>,
    /// A member joined during the current initial delay.
    pub new_member_added: bool,
    /// Deadline for the pending syncs while CompletingRebalance.
    pub sync_deadline_ms: Option<i64>,
}

impl ClassicGroup {
    /// A new empty group.
    #[must_use]
    pub fn new(group_id: String, now_ms: i64) -> Self {
        ClassicGroup {
            group_id,
            state: GroupState::Empty,
            state_timestamp_ms: now_ms,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            join_deadline_ms: None,
            initial_delay_remaining_ms: None,
            new_member_added: false,
            sync_deadline_ms: None,
        }
    }

    /// Moves to `next`.
    ///
    /// # Panics
    /// On a transition Kafka does not allow: a coordinator bug.
    pub fn transition(&mut self, next: GroupState, now_ms: i64) {
        assert!(
            self.state.may_become(next),
            "group {}: invalid transition {:?} -> {:?}",
            self.group_id,
            self.state,
            next
        );
        self.state = next;
        self.state_timestamp_ms = now_ms;
    }

    /// `members` is the only count that `group.max.size` bounds.
    #[must_use]
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Member id of a static member.
    #[must_use]
    pub fn static_member_id(&self, instance_id: &str) -> Option<&str> {
        self.members
            .values()
            .find(|m| m.group_instance_id.as_deref() == Some(instance_id))
            .map(|m| m.member_id.as_str())
    }

    /// Kafka's `validateMember`: UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID.
    ///
    /// # Errors
    /// The refusal.
    pub fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), super::GroupError> {
        use super::GroupError;
        match instance_id {
            Some(instance) => match self.static_member_id(instance) {
                None => Err(GroupError::UnknownMemberId),
                Some(existing) if existing != member_id => Err(GroupError::FencedInstanceId),
                Some(_) => Ok(()),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(GroupError::UnknownMemberId),
        }
    }

    /// Protocols every member supports.
    fn candidate_protocols(&self) -> BTreeSet<String> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return BTreeSet::new();
        };
        let mut set: BTreeSet<String> = first.protocols.iter().map(|(n, _)| n.clone()).collect();
        for m in members {
            set.retain(|p| m.protocols.iter().any(|(n, _)| n == p));
        }
        set
    }

    /// Kafka's `supportsProtocols`: an Empty group takes any non-empty protocol type with at
    /// least one protocol; otherwise the type must match and one of the protocols must be
    /// supported by every member.
    #[must_use]
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        if self.members.is_empty() {
            return !protocols.is_empty();
        }
        let candidates = self.candidate_protocols();
        protocols.iter().any(|(n, _)| candidates.contains(n))
    }

    /// Kafka's `selectProtocol`: each member votes for its first candidate; most votes wins
    /// (ties broken by name, where Kafka's hash map order is arbitrary).
    #[must_use]
    pub fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(n)) {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        let best = votes.values().copied().max()?;
        votes
            .into_iter()
            .find(|(_, v)| *v == best)
            .map(|(n, _)| n.to_owned())
    }

    /// All members rejoined and no KIP-394 member is between its two joins.
    #[must_use]
    pub fn has_all_members_joined(&self) -> bool {
        self.members.values().all(ClassicMember::is_awaiting_join)
            && self.pending_members.is_empty()
    }

    /// Topics the members subscribe to (Kafka's `computeSubscribedTopics`): `None` unless the
    /// protocol type is `consumer`; empty without members; `None` when the protocol is not
    /// selected yet or a member's metadata does not parse as a ConsumerProtocolSubscription.
    #[must_use]
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if !self.uses_consumer_protocol() {
            return None;
        }
        if self.members.is_empty() {
            return Some(BTreeSet::new());
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(consumer_subscription_topics(m.metadata(protocol)?)?);
        }
        Some(topics)
    }

    /// Protocol type `consumer`.
    #[must_use]
    pub fn uses_consumer_protocol(&self) -> bool {
        self.protocol_type.as_deref() == Some("consumer")
    }

    /// Whether offsets of `topic` are in use (Kafka's `isSubscribedToTopic`): when the topics
    /// are unknown (malformed metadata), a consumer group counts as subscribed to everything.
    #[must_use]
    pub fn is_subscribed_to(&self, topic: &str) -> bool {
        self.subscribed_topics()
            .map_or_else(|| self.uses_consumer_protocol(), |t| t.contains(topic))
    }

    /// The GroupMetadataValue Kafka writes for the group as it is now.
    #[must_use]
    pub fn to_record_value(&self) -> GroupMetadataValue {
        let protocol = self.protocol_name.clone();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol: protocol.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| MemberMetadata {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: protocol
                        .as_deref()
                        .and_then(|p| m.metadata(p).cloned())
                        .unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Rebuilds a group from its record (loading): Stable with members, Empty without.
    #[must_use]
    pub fn from_record(group_id: String, v: &GroupMetadataValue, now_ms: i64) -> Self {
        let mut g = ClassicGroup::new(group_id, now_ms);
        g.generation_id = v.generation;
        g.protocol_type = Some(v.protocol_type.clone()).filter(|t| !t.is_empty());
        g.protocol_name = v.protocol.clone();
        g.leader_id = v.leader.clone();
        g.state_timestamp_ms = if v.current_state_timestamp_ms >= 0 {
            v.current_state_timestamp_ms
        } else {
            now_ms
        };
        for (seq, m) in v.members.iter().enumerate() {
            let protocols = v
                .protocol
                .clone()
                .map(|p| vec![(p, m.subscription.clone())])
                .unwrap_or_default();
            g.members.insert(
                m.member_id.clone(),
                ClassicMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    protocols,
                    assignment: m.assignment.clone(),
                    awaiting_join: None,
                    awaiting_sync: None,
                    session_deadline_ms: now_ms.saturating_add(i64::from(m.session_timeout_ms)),
                    join_seq: seq as u64,
                    is_new: false,
                },
            );
        }
        g.state = if g.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        g
    }

    /// Largest rebalance timeout of the members (the join phase's limit).
    #[must_use]
    pub fn rebalance_timeout_ms(&self) -> i32 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }
}
