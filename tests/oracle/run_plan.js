// tests/oracle/run_plan.js - run a model and its cut version with ONNX Runtime; compare outputs.
//
//   node run_plan.js MODEL.onnx OUT_DIR INPUTS.json
//
// INPUTS.json: {"name": {"dtype": "float32"|"int64", "dims": [...], "data": [...]}}. Runs MODEL on
// the inputs, then the submodels of OUT_DIR/plan.json in plan order, each fed by name from the
// graph inputs and earlier submodels' outputs, and prints one JSON line: per graph output the
// max absolute and max relative error between the two runs.
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

function toTensor(spec) {
  if (spec.dtype === 'int64')
    return new ort.Tensor('int64', BigInt64Array.from(spec.data.map(BigInt)), spec.dims);
  return new ort.Tensor('float32', Float32Array.from(spec.data), spec.dims);
}

async function run(modelPath, feeds) {
  const session = await ort.InferenceSession.create(modelPath);
  const inputs = {};
  for (const name of session.inputNames) {
    if (!(name in feeds)) throw new Error(`${modelPath}: no value for input '${name}'`);
    inputs[name] = feeds[name];
  }
  return session.run(inputs);
}

(async () => {
  const [modelPath, outDir, inputsPath] = process.argv.slice(2);
  const specs = JSON.parse(fs.readFileSync(inputsPath, 'utf8'));
  const feeds = {};
  for (const [name, spec] of Object.entries(specs)) feeds[name] = toTensor(spec);
  const reference = await run(modelPath, feeds);

  const plan = JSON.parse(fs.readFileSync(path.join(outDir, 'plan.json'), 'utf8'));
  const values = Object.assign({}, feeds);
  for (const sub of plan.submodules) {
    const results = await run(path.join(outDir, sub.file), values);
    for (const name of sub.outputs) values[name] = results[name];
  }
  const report = {submodules: plan.submodules.length, outputs: {}};
  for (const {value} of plan.outputs) {
    const want = reference[value].data, got = values[value].data;
    if (want.length !== got.length) throw new Error(`output ${value}: ${got.length} elements, expected ${want.length}`);
    let maxAbs = 0, maxRel = 0;
    for (let i = 0; i < want.length; ++i) {
      const a = Number(want[i]), b = Number(got[i]);
      const diff = Math.abs(a - b);
      maxAbs = Math.max(maxAbs, diff);
      maxRel = Math.max(maxRel, diff / Math.max(Math.abs(a), 1e-12));
    }
    report.outputs[value] = {elements: want.length, max_abs: maxAbs, max_rel: maxRel};
  }
  console.log(JSON.stringify(report));
})().catch((e) => { console.error(`run_plan: ${e.message}`); process.exit(1); });
