// Score a cache-tests (http-cache-tests) results file the way cache-tests.fyi does, for the
// required tests only (not the "optimal" or "check" ones, not browser-only ones).
// Usage: node score.mjs <the package's directory> <results.json>
// Prints one JSON object: counts by outcome, and the outcome of every test not passed.
import fs from 'fs'
import path from 'path'

const dir = path.resolve(process.argv[2])
const { default: tests } = await import(path.join(dir, 'tests/index.mjs'))
const { default: surrogate } = await import(path.join(dir, 'tests/surrogate-control.mjs'))
const display = await import(path.join(dir, 'lib/display.mjs'))
tests.push(surrogate)
const names = { '✅': 'pass', '⛔️': 'fail', '🔹': 'setup_fail', '⚪️': 'dependency_fail', '⁉️': 'harness_fail', '↻': 'retry', '-': 'untested' }
const results = JSON.parse(fs.readFileSync(process.argv[3]))
const counts = {}
const others = {}
for (const s of tests) {
  for (const t of s.tests) {
    if (t.browser_only) continue
    if (t.kind && t.kind !== 'required') continue
    const r = names[display.determineTestResult(tests, t.id, results)[2]] || 'other'
    counts[r] = (counts[r] || 0) + 1
    if (r !== 'pass') others[t.id] = [r, results[t.id]]
  }
}
console.log(JSON.stringify({ counts, others }, null, 1))
