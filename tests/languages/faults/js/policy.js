// Fails on purpose, as the settings text says (see ../README.md).
import { policy, deny, none, settings } from 'nriwasm';

/** @param {number} n @returns {number} */
function down(n) {
  return down(n + 1) + 1;
}

export const { configure, handle } = policy({
  on: {
    'create-container'() {
      switch (settings()) {
        case 'exception':
          throw new RangeError('fault injected: exception');
        case 'panic': {
          /** @type {any} */
          const nothing = undefined;
          return nothing.field;
        }
        case 'trap':
        case 'recursion':
          return down(0) > 0 ? none() : none();
        case 'loop':
          for (;;) {
            // spin
          }
        case 'deny':
          return deny('fault injected: denial');
        default:
          return none();
      }
    },
  },
});
