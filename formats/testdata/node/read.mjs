// read.mjs FILE: reads a stint trace with apache-arrow and prints a JSON
// summary for formats/node_test.go. 64-bit values are printed as strings.
import { readFileSync } from 'node:fs';
import { RecordBatchReader } from 'apache-arrow';

const bytes = readFileSync(process.argv[2]);
const reader = RecordBatchReader.from(bytes);
const out = { batches: [], rows: 0, fields: [], metadata: {}, first: null, last: null };
let schemaDone = false;
const row = (batch, i) => {
  const r = {};
  for (const f of batch.schema.fields) r[f.name] = String(batch.getChild(f.name).get(i));
  return r;
};
for (const batch of reader) {
  if (!schemaDone) {
    out.fields = batch.schema.fields.map((f) => `${f.name}:${f.type}:${f.nullable}`);
    for (const [k, v] of batch.schema.metadata) out.metadata[k] = v.trimEnd();
    schemaDone = true;
  }
  out.batches.push(batch.numRows);
  if (batch.numRows > 0) {
    if (out.first === null) out.first = row(batch, 0);
    out.last = row(batch, batch.numRows - 1);
  }
  out.rows += batch.numRows;
}
console.log(JSON.stringify(out));
