import t from 'tap'
import { unavailableReply } from '../../../src/runs/store/redis/redis-replies.ts'

// Which Redis error replies are the store's outage (503) and which stay bugs (500).

t.test('a deployment\'s replies are the store unavailable; a wrong command stays a bug', async t => {
  const code = (message: string, previousErrors?: Array<{ message: string }>): string | undefined => unavailableReply({ message, previousErrors })
  t.equal(code("READONLY You can't write against a read only replica."), 'READONLY')
  t.equal(code("READONLY You can't write against a read only replica. script: 8b2a, on @user_script:1."), 'READONLY', 'a script\'s write on a replica')
  t.equal(code("OOM command not allowed when used memory > 'maxmemory'."), 'OOM')
  t.equal(code('ERR Error running script (call to f_1): @user_script:3: @user_script: 3: -OOM command not allowed when used memory > \'maxmemory\' '), 'OOM', 'an older server\'s script error')
  t.equal(code('EXECABORT Transaction discarded because of previous errors.', [{ message: 'OOM command not allowed' }]), 'OOM', 'a transaction aborted by one')
  for (const reply of ['LOADING Redis is loading the dataset in memory', 'BUSY Redis is busy running a script.', 'MOVED 3999 127.0.0.1:6381',
    'ASK 3999 127.0.0.1:6381', "CROSSSLOT Keys in request don't hash to the same slot", 'NOSCRIPT No matching script.',
    'MASTERDOWN Link with MASTER is down', 'TRYAGAIN Multiple keys request during rehashing of slot', 'CLUSTERDOWN The cluster is down',
    "NOGROUP No such key 'q' or consumer group 'runners'"]) {
    t.equal(code(reply), reply.split(' ')[0], reply)
  }
  for (const bug of ["ERR wrong number of arguments for 'hset' command", 'ERR syntax error', 'WRONGTYPE Operation against a key holding the wrong kind of value',
    'BUSYGROUP Consumer Group name already exists', 'ERR user_script:1: Script attempted to access nonexistent global variable', 'EXECABORT Transaction discarded because of previous errors.']) {
    t.equal(code(bug), undefined, `a bug: ${bug}`)
  }
})
