// tests/oracle/run_model.js - run one model with ONNX Runtime and write its outputs.
//
//   node run_model.js MODEL.onnx INPUTS.json OUTPUTS.json [--repeat N]
//
// INPUTS.json / OUTPUTS.json: cleave's tensor files ({"name": {"dtype", "dims", "data"}}).
// With --repeat N, also prints {"median_s": ..., "min_s": ...} of N timed runs (after one warm-up)
// on one line.
const fs = require('fs');
const ort = require('onnxruntime-node');

function toTensor(spec) {
  switch (spec.dtype) {
  case 'int64': return new ort.Tensor('int64', BigInt64Array.from(spec.data.map(BigInt)), spec.dims);
  case 'int32': return new ort.Tensor('int32', Int32Array.from(spec.data), spec.dims);
  case 'bool': return new ort.Tensor('bool', Uint8Array.from(spec.data.map(Number)), spec.dims);
  case 'float64': return new ort.Tensor('float64', Float64Array.from(spec.data), spec.dims);
  default: return new ort.Tensor('float32', Float32Array.from(spec.data), spec.dims);
  }
}

function fromTensor(tensor) {
  const names = {float32: 'float32', float64: 'float64', int64: 'int64', int32: 'int32', bool: 'bool'};
  const data = Array.from(tensor.data, (v) => (typeof v === 'bigint' ? Number(v) : Number(v)));
  return {dtype: names[tensor.type] || tensor.type, dims: Array.from(tensor.dims), data};
}

(async () => {
  const [modelPath, inputsPath, outputsPath, flag, count] = process.argv.slice(2);
  const specs = JSON.parse(fs.readFileSync(inputsPath, 'utf8'));
  const options = {intraOpNumThreads: 0, graphOptimizationLevel: 'all'};
  const session = await ort.InferenceSession.create(modelPath, options);
  const feeds = {};
  for (const name of session.inputNames) {
    if (!(name in specs)) throw new Error(`no value for input '${name}'`);
    feeds[name] = toTensor(specs[name]);
  }
  const results = await session.run(feeds);
  const out = {};
  for (const name of session.outputNames) out[name] = fromTensor(results[name]);
  fs.writeFileSync(outputsPath, JSON.stringify(out));
  if (flag === '--repeat') {
    const times = [];
    for (let i = 0; i < Number(count); ++i) {
      const start = process.hrtime.bigint();
      await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - start) / 1e9);
    }
    times.sort((a, b) => a - b);
    console.log(JSON.stringify({median_s: times[Math.floor(times.length / 2)], min_s: times[0]}));
  }
})().catch((e) => { console.error(`run_model: ${e.message}`); process.exit(1); });
