// The console's views (issue #20): each builds its DOM from this node's admin API. Text from
// the cluster (topic, group and member names) only ever goes in as text, never as markup.
"use strict";

// el("td", {class: "num"}, "text", childNode, ...) -> element.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function table(id, headers, rows) {
  return el("table", { id }, el("thead", {}, el("tr", {}, headers.map(h => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function tag(kind, text) { return el("span", { class: "tag " + kind }, text); }
function num(v) { return el("td", { class: "num" }, v === null || v === undefined ? "—" : v); }
function bytes(v) {
  if (v === null || v === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + " " + units[i];
}

// Sets the banner that says whose view this is; returns the Raft view.
async function leaderBanner() {
  const raft = await api("/v1/raft");
  const who = document.getElementById("whoami");
  who.textContent = `node ${raft.id} · ${raft.state.toLowerCase()} · term ${raft.term}`;
  const banner = document.getElementById("banner");
  if (raft.state === "Leader") {
    banner.hidden = true;
  } else {
    banner.hidden = false;
    banner.textContent = (raft.leader === null || raft.leader === undefined
      ? `No Raft leader is known to node ${raft.id} (an election may be under way).`
      : `Node ${raft.id} is a ${raft.state.toLowerCase()}; node ${raft.leader} leads the cluster.`) +
      ` This page shows node ${raft.id}'s applied state (Raft index ${raft.last_applied ?? 0}),` +
      " which may trail the leader's by a moment.";
  }
  return raft;
}

function role(raft, id) {
  if (raft.leader === id) return tag("good", "leader");
  if (raft.voters.includes(id)) return tag("info", "voter");
  if (raft.learners.includes(id)) return tag("warn", "learner");
  return tag("bad", "not a member");
}

async function clusterView() {
  const raft = await leaderBanner();
  const [brokers, health] = await Promise.all([api("/v1/brokers"), api("/v1/cluster/health?always_200=true")]);
  const now = Date.now();
  const cards = el("div", { class: "cards" },
    [["Nodes", brokers.length], ["Live", brokers.filter(b => b.live).length],
     ["Raft term", raft.term], ["Leader", raft.leader ?? "none"],
     ["Commit index", latestGauge("zper_raft_commit_index", {}) ?? "—"],
     ["Last log / applied", `${raft.last_log_index ?? 0} / ${raft.last_applied ?? 0}`],
     ["Voters", raft.voters.join(", ")]]
      .map(([label, value]) => el("div", { class: "card" },
        el("div", { class: "label" }, label), el("div", { class: "value" }, value))));
  const rows = brokers.map(b => el("tr", { "data-node": b.id, class: b.live ? "" : "down" },
    el("td", {}, b.id, b.id === raft.id ? " (this node)" : ""),
    el("td", {}, b.endpoints.name || ""),
    el("td", {}, role(raft, b.id)),
    el("td", {}, b.live ? tag("good", "live") : tag("bad", "down"), " ",
      el("span", { class: "muted" }, b.live
        ? `lease ${Math.max(0, Math.round((b.lease_until_ms - now) / 1000))} s left`
        : "lease expired")),
    el("td", {}, b.endpoints.writer), el("td", {}, b.endpoints.reader),
    el("td", {}, b.endpoints.http), el("td", {}, b.dolly_leader ? "Dolly leader" : ""),
    el("td", { class: "admin-only" }, b.id === raft.id ? "" : el("button", {
      class: "danger", type: "button",
      onclick: () => confirm(`Remove node ${b.id} from the cluster?`) &&
        act(`Remove node ${b.id}`, "DELETE", `/v1/cluster/nodes/${b.id}`),
    }, "Remove"))));
  const addForm = el("form", { class: "admin-only", id: "add-node",
    onsubmit: ev => {
      ev.preventDefault();
      const f = ev.target;
      act(`Add node ${f.nodeid.value}`, "POST", "/v1/cluster/nodes",
        { id: Number(f.nodeid.value), http: f.http.value, name: f.nodename.value || undefined });
    } },
  el("label", {}, "Node id ", el("input", { name: "nodeid", type: "number", min: 1, required: true })),
  el("label", {}, "HTTP address ", el("input", { name: "http", placeholder: "host:9644", required: true })),
  el("label", {}, "Name ", el("input", { name: "nodename" })),
  el("button", { type: "submit" }, "Add node"));
  const healthBox = health.healthy && health.warnings.length === 0
    ? el("p", { id: "health" }, tag("good", "healthy"), " No problems.")
    : el("div", { id: "health" },
      health.healthy ? tag("good", "healthy") : tag("bad", "problems"),
      el("ul", { class: "problems" }, health.problems.map(p => el("li", {}, p))),
      el("ul", { class: "warnings" }, health.warnings.map(w => el("li", {}, w))));
  return el("section", {},
    el("h2", {}, "Cluster"), cards,
    el("h2", {}, "Health"), healthBox,
    el("h2", {}, "Nodes"),
    table("nodes", ["Node", "Name", "Raft role", "Liveness", "Writer", "Reader", "HTTP", "",
      el("span", { class: "admin-only" }, "Admin")], rows),
    addForm);
}

async function topicsView() {
  await leaderBanner();
  const [topics, brokers] = await Promise.all([api("/v1/topics"), api("/v1/brokers")]);
  const live = new Set(brokers.filter(b => b.live).map(b => b.id));
  const createForm = el("form", { class: "admin-only", id: "create-topic",
    onsubmit: ev => {
      ev.preventDefault();
      const f = ev.target, body = {};
      if (f.fragments.value) body.fragments = Number(f.fragments.value);
      if (f.rf.value) body.replication_factor = Number(f.rf.value);
      if (f.retain.value) body.retain_hours = Number(f.retain.value);
      body.policy = f.policy.value;
      act(`Create topic ${f.topic.value}`, "POST",
        "/v1/topics/" + encodeURIComponent(f.topic.value), body);
    } },
  el("label", {}, "Topic ", el("input", { name: "topic", required: true })),
  el("label", {}, "Fragments ", el("input", { name: "fragments", type: "number", min: 1 })),
  el("label", {}, "Replication factor ", el("input", { name: "rf", type: "number", min: 1 })),
  el("label", {}, "Retention (hours) ", el("input", { name: "retain", type: "number", min: 1 })),
  el("label", {}, "Policy ", el("select", { name: "policy" },
    el("option", { value: "default" }, "default"),
    el("option", { value: "distribution" }, "distribution"))),
  el("button", { type: "submit" }, "Create topic"));
  const sections = topics.map(t => {
    const under = t.fragments.filter(f => f.isr.length < f.replicas.length).length;
    const rows = t.fragments.map(f => {
      const isUnder = f.isr.length < f.replicas.length;
      const size = f.end_offset === null || f.start_offset === null ? null
        : f.end_offset - f.start_offset;
      return el("tr", { class: isUnder ? "under" : "", "data-fragment": f.id,
        "data-under-replicated": isUnder ? "true" : "false" },
      el("td", {}, f.id),
      el("td", {}, f.leader, live.has(f.leader) ? "" : [" ", tag("bad", "down")]),
      num(f.leader_epoch),
      el("td", {}, f.replicas.join(", ")),
      el("td", {}, f.isr.join(", "), isUnder ? [" ", tag("bad", "under-replicated")] : ""),
      num(f.start_offset), num(f.end_offset), num(f.high_water), num(f.messages),
      el("td", { class: "num" }, bytes(size)));
    });
    const retain = el("form", { class: "admin-only",
      onsubmit: ev => {
        ev.preventDefault();
        act(`Retention of ${t.name}`, "PATCH", "/v1/topics/" + encodeURIComponent(t.name),
          { retain_hours: Number(ev.target.hours.value) });
      } },
    el("label", {}, "Retention (hours) ",
      el("input", { name: "hours", type: "number", min: 1, value: t.retain_hours })),
    el("button", { type: "submit" }, "Change retention"),
    el("button", { type: "button", class: "danger",
      onclick: () => confirm(`Delete topic ${t.name} and all its messages?`) &&
        act(`Delete topic ${t.name}`, "DELETE", "/v1/topics/" + encodeURIComponent(t.name)) },
    "Delete topic"));
    return el("section", { class: "topic", "data-topic": t.name },
      el("h3", {}, t.name, " ",
        el("span", { class: "muted" }, `${t.fragments.length} fragment${t.fragments.length === 1 ? "" : "s"} · replication factor ` +
          `${t.replication_factor} · ${t.policy} policy · retention ${t.retain_hours} h`), " ",
        under ? tag("bad", `${under} under-replicated`) : tag("good", "fully replicated")),
      table(null, ["Fragment", "Leader", "Leader epoch", "Replicas", "In-sync replicas",
        "Start offset", "End offset", "High-water mark", "Messages", "Size"], rows),
      retain);
  });
  return el("section", {}, el("h2", {}, `Topics (${topics.length})`),
    el("p", { class: "muted" }, "Offsets, message counts and sizes are this node's copy " +
      "(— where it holds none). Rows in red have fewer in-sync replicas than replicas."),
    createForm, sections.length ? sections : el("p", {}, "No topics yet."));
}

// The committed offset of `member` (or the group, under `distribution`) in `fragment`.
function committed(group, policy, member, fragment) {
  if (policy === "distribution") return group.offsets[fragment] ?? 0;
  const own = Object.hasOwn(group.member_offsets, member) ? group.member_offsets[member] : {};
  return own[fragment] ?? 0;
}

const MAX_DEPARTED = 10;

async function groupsView() {
  await leaderBanner();
  const topics = await api("/v1/topics");
  const views = await Promise.all(topics.map(t =>
    api(`/v1/topics/${encodeURIComponent(t.name)}/subscriptions`).then(s => [t, s])));
  const now = Date.now();
  const sections = [];
  for (const [t, subs] of views) {
    for (const [name, g] of Object.entries(subs.groups)) {
      const members = Object.entries(g.members).map(([m, until]) =>
        el("li", {}, m, " ", until > now ? tag("good", "live") : tag("bad", "lease expired")));
      const rows = [];
      for (const f of t.fragments) {
        const readers = g.assignment[f.id] || [];
        // Under `default` every member reads every fragment and keeps its own offset, also
        // after it left (a member that rejoins resumes there).
        // Departed members only where they left an offset, and at most MAX_DEPARTED of them.
        const departed = Object.keys(g.member_offsets)
          .filter(m => !readers.includes(m) && Object.hasOwn(g.member_offsets[m], f.id));
        const who = subs.policy === "distribution" ? [readers[0] ?? "(none)"]
          : [...readers, ...departed.slice(0, MAX_DEPARTED)];
        const end = f.high_water ?? f.end_offset;
        for (const m of who.length ? who : ["(none)"]) {
          const c = committed(g, subs.policy, m, f.id);
          const lagMessages = latestGauge("zper_group_lag_messages",
            { topic: t.name, group: name, fragment: f.id });
          rows.push(el("tr", { "data-group": name, "data-fragment": f.id },
            el("td", {}, f.id),
            el("td", {}, m, Object.hasOwn(g.members, m) || m === "(none)" ? "" : [" ", tag("warn", "left")]),
            el("td", { class: "num committed" }, c), num(end),
            el("td", { class: "num lag-bytes" }, end === null ? "—" : bytes(Math.max(0, end - c))),
            el("td", { class: "num lag-messages" }, lagMessages === undefined ? "—" : lagMessages)));
        }
      }
      sections.push(el("section", { class: "group", "data-topic": t.name, "data-group": name },
        el("h3", {}, `${t.name} / ${name}`, " ",
          el("span", { class: "muted" }, `${subs.policy} policy`)),
        el("p", {}, "Members: "), el("ul", {}, members.length ? members : el("li", {}, "none")),
        table(null, ["Fragment", "Member", "Committed offset", "Readable end",
          "Lag (bytes)", "Lag (messages)"], rows)));
    }
  }
  return el("section", {}, el("h2", {}, "Subscription groups"),
    el("p", { class: "muted" }, "Lag is the readable end of this node's copy minus the " +
      "committed offset; lag in messages is counted by the node that leads the fragment."),
    sections.length ? sections : el("p", {}, "No subscription groups yet."));
}

async function chartsView() {
  await leaderBanner();
  const byTopic = l => l.topic;
  const grid = el("div", { class: "charts" },
    lineChart("messages-in", "Messages in, per second", "", rateSeries("zper_topic_messages_written_total", byTopic)),
    lineChart("bytes-in", "Bytes in, per second", "B", rateSeries("zper_topic_bytes_written_total", byTopic)),
    lineChart("messages-out", "Messages out, per second", "", rateSeries("zper_topic_messages_fetched_total", byTopic)),
    lineChart("bytes-out", "Bytes out, per second", "B", rateSeries("zper_topic_bytes_fetched_total", byTopic)),
    lineChart("flush-latency", "Flush latency (mean per interval)", "ms",
      meanSeries("zper_flush_duration_seconds", "fdatasync", 1000)),
    lineChart("replica-lag", "Replica lag (fragments led here)", "B",
      gaugeSeries("zper_replica_lag_bytes", l => `${l.topic}/${l.fragment} → node ${l.replica}`)),
    lineChart("raft-proposals", "Raft proposal latency (mean per interval)", "ms",
      meanSeries("zper_raft_proposal_duration_seconds", "commit + apply", 1000)));
  return el("section", {}, el("h2", {}, "Live charts"),
    el("p", { class: "muted" }, `This node's own metrics, sampled every ${SAMPLE_MS / 1000} s ` +
      "while the page is open."), grid);
}

const VIEWS = { cluster: clusterView, topics: topicsView, groups: groupsView, charts: chartsView };
