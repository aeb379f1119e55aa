// The ESM entry point: the CommonJS implementation's exports, so that ESM and
// CommonJS code in one application share the same error classes.
import notifyd from "./index.js";

export const {
  NotInTransactionError,
  InputError,
  UnknownNotifierError,
  send,
  cancel,
  subscribe,
  unsubscribe,
  putRecipient,
  recipientToken,
} = notifyd;
