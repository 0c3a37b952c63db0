// Workers and stages views of the operators' console: which worker
// processes are alive and what each is working, and every stage with its
// counts and pause, paused and resumed from here. Loaded before app.js,
// which provides el, api, table and route; actions.js provides modal and
// post.
"use strict";

const ago = (t) => {
  const s = Math.round((Date.now() - new Date(t)) / 1000);
  return s < 0 ? "now" : s < 120 ? s + " s ago" : s < 7200 ? Math.round(s / 60) + " min ago" : Math.round(s / 3600) + " h ago";
};

// workRows lists what one owner holds, stage by stage, with a few items.
function workList(work) {
  if (!work.length) return el("span", { class: "muted" }, "idle");
  return el("ul", { class: "work" }, work.map((l) => el("li", {},
    el("b", {}, l.count), " at " + l.pipeline + " / " + l.stage + ": ",
    l.item_ids.flatMap((id, i) => [i ? ", " : "", link("#/items/" + id, "#" + id)]),
    l.count > l.item_ids.length ? " …" : "",
    l.expired ? el("span", { class: "error" }, " (" + l.expired + " expired)") : null)));
}

async function viewWorkers() {
  const d = await api("/workers");
  const rows = d.data.map((w) => el("tr", { "data-owner": w.owner },
    el("td", {}, el("code", {}, w.owner)), el("td", {}, w.live ? pill("live") : pill("stale")),
    el("td", {}, w.host), el("td", { class: "num" }, w.pid), el("td", {}, w.pipelines.join(", ")),
    el("td", {}, time(w.started_at)), el("td", { title: time(w.last_seen) }, ago(w.last_seen)),
    el("td", { class: "num" }, w.leased), el("td", {}, workList(w.work))));
  const live = d.data.filter((w) => w.live).length;
  return [el("h1", {}, "Workers"),
    el("p", { class: "total", id: "workers-total" }, live + (live === 1 ? " live worker" : " live workers") +
      (d.data.length > live ? ", " + (d.data.length - live) + " stale" : "") + "."),
    table(["Owner", "State", "Host", "#PID", "Pipelines", "Started", "Last seen", "#Leased", "Working on"], rows),
    d.orphaned.length ? [el("h2", {}, "Leases of vanished workers"),
      el("p", { class: "muted" }, "Items leased by owners with no worker row: when their leases expire, a live worker takes them over and records the attempt as lost."),
      table(["Owner", "Working on"], d.orphaned.map((l) => el("tr", {}, el("td", {}, el("code", {}, l.owner)), el("td", {}, workList([l])))))] : null,
  ].flat();
}

// stages holds the stages of the last render of the stages view by
// "pipeline/stage", so that a button kept across refreshes acts on what the
// view shows now, not on what it showed when the button was made.
const stages = new Map();

// stageAction pauses or resumes the stage of button b after a confirmation
// that opens on the reason (pause) or on "Do nothing" (resume).
async function stageAction(b) {
  const st = stages.get(b.dataset.pipeline + "/" + b.dataset.stage);
  if (!st) return;
  const verb = st.paused ? "resume" : "pause";
  window.redriveBusy = true;
  try {
    const where = st.pipeline + " / " + st.stage;
    const reason = el("input", { id: "pause-reason", size: 36, maxlength: 500, autocomplete: "off" });
    const body = verb === "pause"
      ? [el("p", {}, "Every worker process stops claiming items of " + where + " within about a second; " +
          st.counts.pending + " pending items wait. Items being worked finish."),
        el("label", { for: "pause-reason" }, "Reason "), reason]
      : [el("p", {}, "Workers claim the items of " + where + " again (" + st.counts.pending + " pending).")];
    const label = verb === "pause" ? "Pause " + where : "Resume " + where;
    const answer = await modal("Confirm: " + verb + " stage " + where, body, [["cancel", "Do nothing"], ["confirm", label]],
      { focus: verb === "pause" ? undefined : "cancel" });
    if (answer !== "confirm") {
      setStatus("Nothing changed.");
      return;
    }
    const req = { pipeline: st.pipeline, stage: st.stage };
    if (verb === "pause" && reason.value.trim()) req.reason = reason.value.trim();
    const done = await post("/stages/" + verb, req, cap(verb) + " changes what every worker process does.");
    if (!done) {
      setStatus("Nothing changed: no token with the admin scope was given.");
      return;
    }
    setStatus((done.changed ? (verb === "pause" ? "Paused " : "Resumed ") + where + "."
      : where + (verb === "pause" ? " was already paused." : " was not paused.")) + (done.warning ? " " + done.warning : ""));
  } catch (e) {
    setStatus("Error: " + e.message);
  } finally {
    window.redriveBusy = false;
  }
  await refresh();
}

async function viewStages(params) {
  const q = new URLSearchParams();
  if (params.get("pipeline")) q.set("pipeline", params.get("pipeline"));
  const [d, charts] = await Promise.all([api("/stages?" + q), timelineSection(q)]);
  stages.clear();
  const rows = d.data.map((st) => {
    stages.set(st.pipeline + "/" + st.stage, st);
    const verb = st.paused ? "resume" : "pause";
    const b = el("button", { type: "button", class: "stage-" + verb, "data-pipeline": st.pipeline, "data-stage": st.stage,
      "aria-label": (st.paused ? "Resume " : "Pause ") + st.pipeline + " / " + st.stage }, st.paused ? "Resume…" : "Pause…");
    b.addEventListener("click", () => stageAction(b));
    return el("tr", { "data-pipeline": st.pipeline, "data-stage": st.stage, "data-key": "s " + st.pipeline + "/" + st.stage },
      el("td", {}, link("#/stages?pipeline=" + encodeURIComponent(st.pipeline), st.pipeline)), el("td", {}, st.stage),
      el("td", {}, st.paused ? pill("paused") : pill("active")),
      el("td", { class: "num" }, st.counts.pending), el("td", { class: "num" }, st.counts.running),
      el("td", { class: "num" }, st.counts.succeeded), el("td", { class: "num" }, st.counts.dead),
      el("td", { class: "num" }, st.workers),
      el("td", {}, st.paused ? [st.paused.by + ", " + time(st.paused.at), st.paused.reason ? el("div", { class: "muted" }, st.paused.reason) : null] : ""),
      el("td", {}, b));
  });
  return [el("h1", {}, params.get("pipeline") ? "Stages of " + params.get("pipeline") : "Stages"),
    el("p", { class: "muted" }, "A paused stage is skipped by every worker process until it is resumed; its items wait as pending. Pausing and resuming need a token with the admin scope and are recorded in the audit log."),
    table(["Pipeline", "Stage", "State", "#Pending", "#Running", "#Succeeded", "#Dead", "#Workers", "Paused by", ""], rows, "stages"),
    statusLine(),
    el("h2", {}, "Attempts over the last hour"), charts];
}
