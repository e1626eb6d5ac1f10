// Where drains and rebalance plans stand, as the dashboard shows them: a host's drain from
// GET /v1/hosts/{id}/drain, the plans from GET /v1/rebalance/plans (hosts:admin).

import { Refused, get } from "./api.js";
import { $, badge, bar, clock, count, element, syncChildren } from "./dom.js";

const SHOWN_PLANS = 10;
const SHOWN_REASONS = 3;
// Names of VMs that left a drained host before its page saw them, looked up per refresh at most.
const NAME_LOOKUPS = 20;

/** Whether the host has a drain (its status says so while it is not offline). */
export const drains = (host) => host.status === "draining" || host.status === "drained";

/** The host's drain, or null when it has none (404: ended meanwhile). */
export async function drainOf(hostId) {
  try {
    return await get(`/v1/hosts/${encodeURIComponent(hostId)}/drain`);
  } catch (error) {
    if (error instanceof Refused && error.status === 404) return null;
    throw error;
  }
}

/** The names of the VMs a host's drain lists: those seen on the host, and those that left it before
 * the page saw them, looked up once each (an id the token may not read stays an id). */
export class VmNames {
  constructor() {
    this.known = new Map();
    this.asked = new Set();
  }

  learn(vms) {
    for (const vm of vms) this.known.set(vm.id, vm.name);
  }

  async complete(drain) {
    const missing = drain.moved
      .map((vm) => vm.vm_id)
      .filter((id) => !this.known.has(id) && !this.asked.has(id))
      .slice(0, NAME_LOOKUPS);
    await Promise.all(
      missing.map(async (id) => {
        this.asked.add(id);
        try {
          this.known.set(id, (await get(`/v1/vms/${encodeURIComponent(id)}`)).name);
        } catch {
          // shown by its id
        }
      }),
    );
    return this.known;
  }
}

/** Of every VM the drain has had to move: how many moved, and where the others stand. */
function drainFigures(drain) {
  const moved = drain.moved.length;
  const inFlight = drain.in_flight.length;
  const queued = drain.queued.length;
  const stuck = drain.stuck.length;
  return { moved, inFlight, queued, stuck, total: moved + inFlight + queued + stuck };
}

/** "1 of 2 VMs moved · 0 in flight · 0 queued · 1 stuck" */
function drainText(drain) {
  const f = drainFigures(drain);
  const left = `${f.inFlight} in flight · ${f.queued} queued · ${f.stuck} stuck`;
  return `${f.moved} of ${count(f.total, "VM")} moved · ${left}`;
}

/** The drain's progress on one line: a bar, the figures, and why VMs are stuck (the first few). */
export function drainLine(drain) {
  const f = drainFigures(drain);
  const reasons = drain.stuck
    .slice(0, SHOWN_REASONS)
    .map((vm) => element("span", { className: "reason", text: `stuck ${vm.vm_id}: ${vm.reason}` }));
  return element("span", { className: "progress" }, bar(f.moved, f.total), ` ${drainText(drain)}`, ...reasons);
}

/** A host's drain panel: its state, times, progress, and each VM it moves (stuck ones first). */
export function renderHostDrain(drain, namesById) {
  $("host-drain-panel").hidden = drain === null;
  if (drain === null) return;
  const state = $("host-drain-state");
  state.textContent = drain.state.replace("_", " ");
  state.className = `badge ${drain.state}`;
  const ended = drain.ended_at ? ` · ended ${clock(drain.ended_at)}` : "";
  $("host-drain-times").textContent =
    `started ${clock(drain.created_at)} · deadline ${clock(drain.deadline_at)}${ended}` +
    ` · ${drain.max_parallel} at once${drain.evacuate ? "" : " · not evacuating"}`;
  const f = drainFigures(drain);
  $("host-drain-progress").replaceChildren(bar(f.moved, f.total), ` ${drainText(drain)}`);
  const rows = [
    ...drain.stuck.map((vm) => ({ id: vm.vm_id, state: "stuck", detail: vm.reason })),
    ...drain.in_flight.map((id) => ({ id, state: "in flight", detail: "migrating away" })),
    ...drain.queued.map((id) => ({ id, state: "queued", detail: "waits for a migration slot" })),
    ...drain.moved.map((vm) => ({ id: vm.vm_id, state: "moved", detail: `now on ${vm.to}` })),
  ];
  syncChildren(
    $("host-drain-vms"),
    rows,
    (row) => row.id,
    (row) => {
      const made = element("li");
      made.dataset.vm = row.id;
      return made;
    },
    (made, row) => {
      made.replaceChildren(
        element("span", { className: "name", text: namesById.get(row.id) ?? row.id }),
        " ",
        badge(row.state, row.state.replace(" ", "_")),
        element("span", { className: "reason", text: row.detail }),
      );
    },
  );
}

function planFigures(plan) {
  const of = (state) => plan.progress[state] ?? 0;
  return {
    moved: of("moved"),
    skipped: of("skipped"),
    inFlight: of("in_flight"),
    queued: of("queued"),
    total: plan.moves.length,
  };
}

function renderPlan(row, plan) {
  const f = planFigures(plan);
  const left = `${f.skipped} skipped · ${f.inFlight} in flight · ${f.queued} queued`;
  const figures = f.total ? `${f.moved} of ${count(f.total, "move")} made · ${left}` : "no move to make";
  const when = plan.applied_at ? `applied ${clock(plan.applied_at)}` : `planned ${clock(plan.created_at)}`;
  const skipped = plan.moves
    .filter((move) => move.state === "skipped")
    .slice(0, SHOWN_REASONS)
    .map((move) => element("span", { className: "reason", text: `skipped ${move.vm_id}: ${move.reason ?? ""}` }));
  row.replaceChildren(
    element("span", { className: "name", text: plan.goal }),
    " ",
    badge(plan.state),
    ` ${when} · ${plan.score} ${plan.score_before.toFixed(3)} → ${plan.score_after.toFixed(3)}`,
    // Moves made or skipped fill the bar: what is left of it is still to do.
    element("span", { className: "progress" }, bar(f.moved + f.skipped, f.total), ` ${figures}`),
    ...skipped,
  );
}

/** The rebalance panel from the newest plans; a token without hosts:admin is told what it lacks. */
export async function refreshPlans() {
  let plans;
  try {
    plans = (await get(`/v1/rebalance/plans?limit=${SHOWN_PLANS}`)).items;
  } catch (error) {
    if (!(error instanceof Refused && error.status === 403)) throw error;
    $("rebalance-empty").textContent = "Rebalance plans need a token with the hosts:admin scope.";
    $("rebalance-empty").hidden = false;
    $("rebalance").replaceChildren();
    return;
  }
  $("rebalance-empty").textContent = "No rebalance plan yet.";
  $("rebalance-empty").hidden = plans.length > 0;
  syncChildren(
    $("rebalance"),
    plans,
    (plan) => plan.id,
    (plan) => {
      const row = element("li");
      row.dataset.plan = plan.id;
      return row;
    },
    renderPlan,
  );
}
