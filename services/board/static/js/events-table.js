// The page's decision for every declared event name (shared/events.py EVENTS).
//
// Two tables, both plain object literals keyed by event name so a contract test can parse
// them: ROUTING says what a live frame refreshes, FEED says whether the human activity feed
// shows it. A name missing from either table is treated as unknown: routing warns once and
// takes the safe path (reload), the feed hides it (an allow-list fails closed).

// ROUTING: `card` refreshes the card (GET /tasks/{ref}); `tabs` are the open drawer's tabs the
// event makes stale ("details" is patched from the same card read); `ends` also refreshes the
// drawer when it shows changes.source or changes.target ("acceptance" is the details tab's
// acceptance list, read on its own); `lists` reloads projects and tasks;
// `noise` means nothing visible can change.
export const ROUTING = {
  project_created: { lists: true },
  project_updated: { lists: true },
  task_created: { card: true, tabs: ["details", "activity"] },
  task_updated: { card: true, tabs: ["details", "activity"] },
  task_claimed: { card: true, tabs: ["details", "activity"] },
  task_heartbeat: { noise: true },
  task_moved: { card: true, tabs: ["details", "comments", "activity"] },
  task_reopened: { card: true, tabs: ["details", "activity"] },
  task_resumed: { card: true, tabs: ["details", "comments", "activity"] },
  task_archived: { card: true, tabs: ["details", "activity"] },
  report_written: { card: true, tabs: ["reports", "activity"] },
  task_delivered: { card: true, tabs: ["details", "reports", "activity"] },
  report_waived: { card: true, tabs: ["details", "reports", "activity"] },
  acceptance_changed: { card: true, tabs: ["details", "acceptance", "activity"] },
  acceptance_pruned: { card: true, tabs: ["details", "acceptance", "activity"] },
  acceptance_override: { card: true, tabs: ["details", "acceptance", "activity"] },
  epic_auto_start: { card: true, tabs: ["details", "activity"] },
  comment_added: { card: false, tabs: ["comments", "activity"] },
  relation_added: { card: false, tabs: ["relations", "activity"], ends: true },
  relation_removed: { card: false, tabs: ["relations", "activity"], ends: true },
  label_gc: { lists: true },
  session_registered: { card: false, tabs: ["sessions", "activity"] },
  session_closed: { card: false, tabs: ["sessions", "activity"] },
  progress: { card: false, tabs: ["activity"] },
  attachment_added: { card: false, tabs: ["attachments", "activity"] },
  attachment_updated: { card: false, tabs: ["attachments", "activity"] },
  attachment_removed: { card: false, tabs: ["attachments", "activity"] },
  import_completed: { lists: true },
  // Conditions arrive as frames only when a project persists them (settings.persist_conditions);
  // the live lane is the `signal` listener. A column's condition reloads the counts; a card's
  // refreshes its markers (blocked_by, stale claim).
  wip_exceeded: { lists: true },
  wip_cleared: { lists: true },
  lane_drained: { lists: true },
  lane_refilled: { lists: true },
  card_blocked: { card: true, tabs: ["details", "relations", "activity"] },
  card_unblocked: { card: true, tabs: ["details", "relations", "activity"] },
  transition_rejected: { card: false, tabs: ["activity"] },
  status_timeout: { card: true, tabs: ["activity"] },
  card_idle: { card: true, tabs: ["activity"] },
  claim_stale: { card: true, tabs: ["details", "activity"] },
};

// FEED: `admit` is true, false, or "fields" (task_updated: only when a human-visible field
// changed, see HUMAN_FIELDS). `family` groups rows for burst folding; `why` records each refusal.
export const FEED = {
  project_created: { admit: false, why: "board bookkeeping; the project switcher shows it" },
  project_updated: { admit: false, why: "board bookkeeping" },
  task_created: { admit: true, family: "created" },
  task_updated: { admit: "fields" },
  task_claimed: { admit: true, family: "status" },
  task_heartbeat: { admit: false, why: "wire noise; liveness, not news" },
  task_moved: { admit: true, family: "status" },
  task_reopened: { admit: true, family: "status" },
  task_resumed: { admit: false, why: "the automatic awaiting → todo return follows the answer the feed already shows" },
  task_archived: { admit: true, family: "status" },
  report_written: { admit: true, family: "report" },
  task_delivered: { admit: true, family: "status" },
  report_waived: { admit: true, family: "status" },
  acceptance_changed: { admit: false, why: "acceptance bookkeeping; the drawer shows it" },
  acceptance_pruned: { admit: false, why: "acceptance bookkeeping; the drawer shows it" },
  acceptance_override: { admit: false, why: "acceptance bookkeeping; the drawer shows it" },
  epic_auto_start: { admit: true, family: "status" },
  comment_added: { admit: true, family: "comment" },
  relation_added: { admit: true, family: "relation" },
  relation_removed: { admit: true, family: "relation" },
  label_gc: { admit: false, why: "housekeeping by the board" },
  session_registered: { admit: false, why: "agent session lifecycle is machine-side" },
  session_closed: { admit: false, why: "agent session lifecycle is machine-side" },
  progress: { admit: false, why: "historical importer row" },
  attachment_added: { admit: true, family: "attachment" },
  attachment_updated: { admit: false, why: "a content replace, not a new file" },
  attachment_removed: { admit: true, family: "attachment" },
  import_completed: { admit: false, why: "a state import filled the board; the lists reload, each card is not news" },
  wip_exceeded: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  wip_cleared: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  lane_drained: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  lane_refilled: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  card_blocked: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  card_unblocked: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  transition_rejected: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  status_timeout: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  card_idle: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
  claim_stale: { admit: false, why: "a condition the board noticed; column headers and card markers show it" },
};

// task_updated fields a person cares about, and the folding family each belongs to. Writers
// name fields in snake_case; camelCase spellings are accepted too (see fieldName in feed.js).
export const HUMAN_FIELDS = {
  title: "text",
  description: "text",
  priority: "attributes",
  kind: "attributes",
  labels: "labels",
  assignee_kind: "people",
  assignee_id: "people",
  reporter_kind: "people",
  reporter_id: "people",
};
