// The drawing pad: pointer events (mouse, pen, touch) draw white strokes on black, as MNIST's digits are.
// The canvas goes to the server as PNG; all preprocessing happens there.
"use strict";

const pad = document.getElementById("pad");
const ctx = pad.getContext("2d");
const $ = (id) => document.getElementById(id);
let drawing = false;
let last = null;
let inked = false;

function setState(state) { document.body.dataset.state = state; }

function clearPad() {
  ctx.fillStyle = "#000";
  ctx.fillRect(0, 0, pad.width, pad.height);
  inked = false;
  $("digit").textContent = "–";
  $("confidence").textContent = "–";
  $("top3").innerHTML = "";
  $("seen").removeAttribute("src");
  $("message").textContent = "";
  setState("ready");
}

function point(event) {
  const box = pad.getBoundingClientRect();
  return { x: (event.clientX - box.left) * pad.width / box.width, y: (event.clientY - box.top) * pad.height / box.height };
}

function stroke(from, to) {
  ctx.strokeStyle = "#fff";
  ctx.lineWidth = 20;  // about 2 pixels once a digit is scaled into MNIST's 20x20 box
  ctx.lineCap = "round";
  ctx.lineJoin = "round";
  ctx.beginPath();
  ctx.moveTo(from.x, from.y);
  ctx.lineTo(to.x, to.y);
  ctx.stroke();
  inked = true;
}

pad.addEventListener("pointerdown", (event) => {
  event.preventDefault();
  pad.setPointerCapture(event.pointerId);
  drawing = true;
  last = point(event);
  stroke(last, last);
});
pad.addEventListener("pointermove", (event) => {
  if (!drawing) return;
  const next = point(event);
  stroke(last, next);
  last = next;
});
function finish() {
  if (!drawing) return;
  drawing = false;
  predict();
}
pad.addEventListener("pointerup", finish);
pad.addEventListener("pointercancel", finish);

function showAnswer(answer) {
  $("digit").textContent = answer.digit;
  $("confidence").textContent = (100 * answer.confidence).toFixed(1) + " %";
  $("top3").innerHTML = answer.top3.map((t) =>
    `<li><span>${t.digit}</span><span class="track"><span class="bar" style="display:block;width:${(100 * t.probability).toFixed(1)}%"></span></span>` +
    `<span>${(100 * t.probability).toFixed(1)} %</span></li>`).join("");
  $("seen").src = answer.input;
  $("message").textContent = "";
}

async function predict() {
  if (!inked) { $("message").textContent = "Draw a digit first."; return; }
  setState("predicting");
  const blob = await new Promise((resolve) => pad.toBlob(resolve, "image/png"));
  try {
    const response = await fetch("/api/predict", { method: "POST", headers: { "Content-Type": "image/png" }, body: blob });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    showAnswer(answer);
    setState("answered");
  } catch (error) {
    $("message").textContent = error.message;
    setState("error");
  }
}

$("clear").addEventListener("click", clearPad);
$("predict").addEventListener("click", predict);

fetch("/api/model").then((r) => r.json()).then((m) => {
  $("model").textContent = m.run_id
    ? `Model: ${m.model} depth ${m.depth}, trained on ${m.dataset === "mnist_aug" ? "augmented " : ""}MNIST ` +
      `(${m.train_images} images), test accuracy ${m.final_accuracy} % — run ${m.run_id}`
    : `Model: ${m.model}`;
});

clearPad();
