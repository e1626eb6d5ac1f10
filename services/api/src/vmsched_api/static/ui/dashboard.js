// The vmsched dashboard: the fleet page (#/) and a host's page (#/hosts/<id>), drawn from the /v1
// JSON routes. It polls every POLL_MS; where the API serves GET /v1/events it also follows that
// stream and refreshes as soon as an event arrives (placements then show within a fraction of a
// second). Every value from the API is written as text, never as HTML.

import { Refused, Tail, authorization, get, token } from "./api.js";
import { $, badge, bar, clock, count, element, hostHref, syncChildren } from "./dom.js";
import { VmNames, drainLine, drainOf, drains, refreshPlans, renderHostDrain } from "./progress.js";
import { follow } from "./sse.js";

const POLL_MS = 2000;
const EVENTS_RETRY_MS = 5000;
// Between two refreshes that events asked for, at least this long and as long as the last refresh
// took: a busy fleet's stream would otherwise keep the page reading the API without a pause.
const EVENT_GAP_MS = 250;
const SHOWN_PENDING = 50;
const SHOWN_PLACEMENTS = 25;
// Drains read each poll (one request each): a fleet-wide maintenance shows the first ones' progress.
const SHOWN_DRAINS = 20;
const NO_ZONE = "no zone";
const RESOURCES = [
  ["cpu", "cpu"],
  ["memory_mb", "memory MiB"],
  ["disk_gb", "disk GB"],
  ["gpu", "gpu"],
];

// ---- the fleet page ----------------------------------------------------------------------

/** The host's fullest resource, allocated over capacity, 0..1 (the heatmap's colour). */
function utilisation(host) {
  let fullest = 0;
  for (const [name] of RESOURCES) {
    const capacity = host.capacity[name];
    if (capacity > 0) fullest = Math.max(fullest, host.allocated[name] / capacity);
  }
  return Math.min(fullest, 1);
}

/** The states that take a host out of placement, as CSS classes (none: it takes VMs). */
function hostStates(host) {
  const states = [];
  if (host.scheduling_paused) states.push("paused");
  if (host.status === "draining" || host.status === "offline") states.push(host.status);
  return states;
}

function describeHost(host) {
  const used = RESOURCES.filter(([name]) => host.capacity[name] > 0).map(
    ([name, label]) => `${label} ${host.allocated[name]}/${host.capacity[name]}`,
  );
  const states = hostStates(host);
  // What limits which VMs it takes besides room: its project, its networks (the host page has the rest).
  const facts = [];
  if (host.dedicated_to) facts.push(`dedicated to ${host.dedicated_to}`);
  if (host.networks?.length) facts.push(`networks ${host.networks.join(", ")}`);
  const shown = [host.status, ...states.filter((s) => s !== host.status)].join(", ");
  return `${host.id} (${shown}): ${count(host.vm_count, "VM")}; ${[used.join(", "), ...facts].join("; ")}`;
}

function renderHeatmap(hosts) {
  const zones = new Map();
  for (const host of hosts) {
    const zone = host.labels.zone ?? NO_ZONE;
    if (!zones.has(zone)) zones.set(zone, []);
    zones.get(zone).push(host);
  }
  const ordered = [...zones.entries()].sort(([a], [b]) => (a === NO_ZONE) - (b === NO_ZONE) || a.localeCompare(b));
  syncChildren(
    $("zones"),
    ordered,
    ([zone]) => zone,
    ([zone]) => element("div", { className: "zone" }, element("h3"), element("div", { className: "hosts" })),
    (section, [zone, members]) => {
      section.firstChild.textContent = `${zone === NO_ZONE ? zone : `zone ${zone}`} · ${count(members.length, "host")}`;
      members.sort((a, b) => a.id.localeCompare(b.id));
      syncChildren(
        section.lastChild,
        members,
        (host) => host.id,
        (host) => {
          const cell = element("a", { className: "host", href: hostHref(host.id) });
          cell.dataset.host = host.id;
          return cell;
        },
        (cell, host) => {
          const title = describeHost(host);
          if (cell.title === title) return; // the title names every figure the square shows
          cell.className = ["host", ...hostStates(host)].join(" ");
          cell.style.setProperty("--util", utilisation(host).toFixed(3));
          cell.title = title;
          cell.setAttribute("aria-label", title);
        },
      );
    },
  );
}

/** The hosts taking no new VM; a draining one with its drain's progress (``drainsById``: those read). */
function renderMaintenance(hosts, drainsById) {
  const out = hosts
    .filter((host) => hostStates(host).length > 0 || drains(host))
    .sort((a, b) => a.id.localeCompare(b.id));
  $("maintenance-empty").hidden = out.length > 0;
  syncChildren(
    $("maintenance"),
    out,
    (host) => host.id,
    (host) => {
      const row = element("li");
      row.dataset.host = host.id;
      return row;
    },
    (row, host) => {
      const states = [...hostStates(host), ...(host.status === "drained" ? ["drained"] : [])];
      const drain = drainsById.get(host.id);
      // A drain not read (beyond SHOWN_DRAINS, or ended meanwhile): the VMs left are its measure.
      const vms = count(host.vm_count, "VM");
      const left = drain
        ? drainLine(drain)
        : element("span", { className: "reason", text: host.status === "draining" ? `${vms} still on it` : vms });
      row.replaceChildren(
        element("a", { className: "name", href: hostHref(host.id), text: host.id }),
        " ",
        ...states.map((state) => badge(state)),
        left,
      );
    },
  );
}

/** The drains of the draining and drained hosts (the first SHOWN_DRAINS), by host id. */
async function readDrains(hosts) {
  const draining = hosts.filter(drains).sort((a, b) => a.id.localeCompare(b.id)).slice(0, SHOWN_DRAINS);
  const read = await Promise.all(draining.map((host) => drainOf(host.id)));
  return new Map(draining.map((host, index) => [host.id, read[index]]).filter(([, drain]) => drain !== null));
}

function reasonOf(vm) {
  if (vm.status_reason) return vm.status_reason;
  return vm.status === "waiting" ? "waiting for room (no reason recorded yet)" : "no reason recorded";
}

/** The placement decision of a VM that found no host, as lines for people. */
async function decisionLines(vmId) {
  const placement = await get(`/v1/vms/${vmId}/placement`);
  const decision = placement.decision;
  if (!decision) return ["no scheduler has decided yet"];
  const lines = [`${decision.eligible} of ${decision.considered} hosts passed every rule (${decision.strategy})`];
  for (const [rule, rejected] of Object.entries(decision.rejections)) {
    lines.push(`${rule}: ${count(rejected, "host")} rejected`);
    for (const example of decision.examples[rule] ?? []) lines.push(`  ${example.host}: ${example.reason}`);
  }
  if (decision.detail) lines.push(decision.detail);
  return lines;
}

function renderPending(vms) {
  const newest = vms.sort((a, b) => (b.created_at ?? "").localeCompare(a.created_at ?? "")).slice(0, SHOWN_PENDING);
  $("pending-empty").hidden = newest.length > 0;
  syncChildren(
    $("pending"),
    newest,
    (vm) => vm.id,
    (vm) => {
      const details = element("details", {}, element("summary", { text: "placement decision" }), element("pre"));
      details.addEventListener("toggle", async () => {
        if (!details.open) return;
        const out = details.lastChild;
        out.textContent = "…";
        try {
          out.textContent = (await decisionLines(vm.id)).join("\n");
        } catch (error) {
          out.textContent = String(error.message ?? error);
        }
      });
      const row = element("li", {}, element("span"), details);
      row.dataset.vm = vm.id;
      return row;
    },
    (row, vm) => {
      const waits = vm.status === "waiting" && vm.wait_until ? ` · waits until ${clock(vm.wait_until)}` : "";
      row.firstChild.replaceChildren(
        element("span", { className: "name", text: vm.name }),
        " ",
        badge(vm.status),
        ` ${vm.cpu} cpu, ${vm.memory_mb} MiB · ${vm.project}${waits}`,
        element("span", { className: "reason", text: reasonOf(vm) }),
      );
    },
  );
}

function renderPlacements(vms, seen) {
  const newest = vms.slice(-SHOWN_PLACEMENTS).reverse();
  syncChildren(
    $("placements"),
    newest,
    (vm) => vm.id,
    (vm) => {
      const row = element("li", { className: seen.size ? "new" : "" });
      row.dataset.vm = vm.id;
      return row;
    },
    (row, vm) => {
      const where = vm.hypervisor_id
        ? element("a", { href: hostHref(vm.hypervisor_id), text: vm.hypervisor_id })
        : element("span", { className: "empty", text: "no host" });
      row.replaceChildren(
        element("span", { className: "name", text: vm.name }),
        " → ",
        where,
        " ",
        badge(vm.status),
        ` ${clock(vm.scheduled_at ?? vm.created_at)}`,
      );
    },
  );
  for (const vm of newest) seen.add(vm.id);
}

function fleetPage() {
  const pending = [new Tail({ status: "waiting" }), new Tail({ status: "unschedulable" })];
  const newest = new Tail({});
  const seen = new Set();
  return {
    main: $("fleet-page"),
    async refresh() {
      await Promise.all([
        shown("fleet-error", async () => {
          const hosts = await get("/v1/hosts");
          renderHeatmap(hosts);
          renderMaintenance(hosts, await readDrains(hosts));
        }),
        shown("rebalance-error", refreshPlans),
        shown("pending-error", async () => renderPending((await Promise.all(pending.map((t) => t.read()))).flat())),
        shown("placements-error", async () => renderPlacements(await newest.read(), seen)),
      ]);
    },
  };
}

// ---- a host's page -----------------------------------------------------------------------

function renderResources(host) {
  const rows = RESOURCES.map(([name, label]) => {
    const capacity = host.capacity[name];
    const allocated = host.allocated[name];
    const ratio = host.overcommit[name.replace(/_(mb|gb)$/, "")];
    const extra = ratio && ratio !== 1 ? ` (×${ratio} overcommit)` : "";
    return element(
      "tr",
      {},
      element("th", { text: label }),
      element("td", {}, bar(allocated, capacity)),
      element("td", { text: `${allocated} / ${capacity}${extra}` }),
    );
  });
  $("host-resources").replaceChildren(...rows);
}

function renderHostVms(vms) {
  const rows = vms.map((vm) =>
    element(
      "tr",
      {},
      element("td", { text: vm.name }),
      element("td", {}, badge(vm.status)),
      element("td", { text: String(vm.cpu) }),
      element("td", { text: String(vm.memory_mb) }),
      element("td", { text: String(vm.disk_gb) }),
      element("td", { text: String(vm.gpu) }),
      element("td", { text: vm.project }),
      element("td", { text: clock(vm.scheduled_at) }),
    ),
  );
  $("host-vms").tBodies[0].replaceChildren(...rows);
}

function hostPage(hostId) {
  const path = `/v1/hosts/${encodeURIComponent(hostId)}`;
  const vms = new Tail({ hypervisor_id: hostId }, 1000);
  const names = new VmNames();
  $("host-id").textContent = hostId;
  return {
    main: $("host-page"),
    async refresh() {
      await shown("host-error", async () => {
        const [host, info, onHost] = await Promise.all([
          get(path),
          get(`${path}/scheduling-info`, { accept: "text/plain" }),
          vms.read(),
        ]);
        const status = $("host-status");
        const states = [host.status, ...hostStates(host).filter((s) => s !== host.status)];
        status.textContent = states.join(" · ");
        status.className = `badge ${states.at(-1)}`;
        renderResources(host);
        $("scheduling-info").textContent = info;
        $("host-vm-count").textContent = count(host.vm_count, "VM");
        renderHostVms(onHost);
        names.learn(onHost);
        const drain = drains(host) ? await drainOf(hostId) : null;
        renderHostDrain(drain, drain ? await names.complete(drain) : names.known);
      });
    },
  };
}

// ---- the shell: token, routing, polling, events --------------------------------------------

let page = null;
let timer = null;
let refreshing = null;
let again = false; // an event or a new page came while a refresh was under way
let eventsFollowed = false;

/** Run ``draw``; show what went wrong in the element ``errorId`` (a 401 asks for a token again). */
async function shown(errorId, draw) {
  try {
    await draw();
    $(errorId).textContent = "";
  } catch (error) {
    if (error instanceof Refused && error.status === 401) throw error;
    $(errorId).textContent = String(error.message ?? error);
  }
}

function pageOf(hash) {
  const match = /^#\/hosts\/(.+)$/.exec(hash);
  return match ? hostPage(decodeURIComponent(match[1])) : fleetPage();
}

function show(next) {
  page = next;
  for (const main of document.querySelectorAll("main")) main.hidden = main !== page.main;
  refreshNow();
}

async function refreshNow() {
  if (!token.get()) return;
  if (refreshing) {
    again = true;
    return;
  }
  again = false;
  clearTimeout(timer);
  refreshing = (async () => {
    const started = performance.now();
    try {
      await page.refresh();
      $("refreshed").textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (error) {
      if (error instanceof Refused && error.status === 401) {
        askForToken("The API refused the token (expired or revoked?): enter one again.");
        return;
      }
      $("refreshed").textContent = String(error.message ?? error);
    } finally {
      refreshing = null;
    }
    const took = performance.now() - started;
    timer = setTimeout(refreshNow, again ? Math.max(EVENT_GAP_MS, took) : POLL_MS);
  })();
}

function setFeed(live) {
  const feed = $("feed");
  feed.textContent = live ? "live events + polling" : `polling every ${POLL_MS / 1000} s`;
  feed.classList.toggle("live", live);
}

/** Follow GET /v1/events while the API serves it; an API without it (404) leaves polling alone. */
async function followEvents() {
  if (eventsFollowed) return;
  eventsFollowed = true;
  for (;;) {
    let outcome;
    try {
      outcome = await follow("/v1/events", authorization(), {
        onOpen: () => setFeed(true),
        onEvent: () => refreshNow(),
      });
    } catch {
      outcome = "failed";
    }
    setFeed(false);
    // No such route (an API without it answers 404), or the token refused: polling alone, until
    // the next token is entered.
    if (outcome === "absent" || !token.get()) break;
    await new Promise((resume) => setTimeout(resume, EVENTS_RETRY_MS));
  }
  eventsFollowed = false;
}

function askForToken(message = "") {
  token.forget();
  clearTimeout(timer);
  for (const main of document.querySelectorAll("main")) main.hidden = true;
  $("forget-token").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("token").focus();
}

function start() {
  $("login").hidden = true;
  $("forget-token").hidden = false;
  setFeed(false);
  show(pageOf(location.hash));
  followEvents();
}

$("login").addEventListener("submit", (submitted) => {
  submitted.preventDefault();
  token.set($("token").value.trim());
  $("token").value = "";
  start();
});
$("forget-token").addEventListener("click", () => askForToken());
window.addEventListener("hashchange", () => token.get() && show(pageOf(location.hash)));

if (token.get()) start();
else askForToken();
