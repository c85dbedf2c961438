/** AssemblyScript's binary operators (as the syntax trees name them) and their WGSL symbols. */

export const OPERATORS: Record<string, string> = {
  Plus: '+',
  Minus: '-',
  Asterisk: '*',
  Slash: '/',
  Percent: '%',
  Ampersand: '&',
  Bar: '|',
  Caret: '^',
  LessThan_LessThan: '<<',
  GreaterThan_GreaterThan: '>>',
  GreaterThan_GreaterThan_GreaterThan: '>>>',
  LessThan: '<',
  LessThan_Equals: '<=',
  GreaterThan: '>',
  GreaterThan_Equals: '>=',
  Equals_Equals: '==',
  Exclamation_Equals: '!=',
  Equals_Equals_Equals: '==',
  Exclamation_Equals_Equals: '!=',
  Ampersand_Ampersand: '&&',
  Bar_Bar: '||',
};
export const COMPARISONS = new Set([
  'LessThan',
  'LessThan_Equals',
  'GreaterThan',
  'GreaterThan_Equals',
  'Equals_Equals',
  'Exclamation_Equals',
  'Equals_Equals_Equals',
  'Exclamation_Equals_Equals',
]);
export const COMPOUND: Record<string, string> = {
  Plus_Equals: 'Plus',
  Minus_Equals: 'Minus',
  Asterisk_Equals: 'Asterisk',
  Slash_Equals: 'Slash',
  Percent_Equals: 'Percent',
  Ampersand_Equals: 'Ampersand',
  Bar_Equals: 'Bar',
  Caret_Equals: 'Caret',
  LessThan_LessThan_Equals: 'LessThan_LessThan',
  GreaterThan_GreaterThan_Equals: 'GreaterThan_GreaterThan',
  GreaterThan_GreaterThan_GreaterThan_Equals: 'GreaterThan_GreaterThan_GreaterThan',
};

export function isAssignment(operator: string): boolean {
  return operator === 'Equals' || operator in COMPOUND;
}
